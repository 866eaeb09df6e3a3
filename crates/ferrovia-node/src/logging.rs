//! A logger for ferrovia's own binaries (and programs that want one line
//! to get ferrovia's operator messages): `RUST_LOG=info` (or `warn`,
//! `debug`, ...) prints records to stderr; unset or `off`, it stays silent.
//! Libraries never install it by themselves.

use std::io::Write;

struct Stderr;

impl log::Log for Stderr {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            // One write per record, so lines of several threads stay whole.
            let line = format!("[{} {}] {}\n", r.level(), r.target(), r.args());
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }

    fn flush(&self) {}
}

static STDERR: Stderr = Stderr;

/// The level `RUST_LOG` asks for: its last comma-separated item that names
/// a level (`info`, `ferrovia=debug` reads as debug); `Off` otherwise.
pub(crate) fn level_of(spec: &str) -> log::LevelFilter {
    spec.split(',')
        .filter_map(|item| {
            let level = item.rsplit('=').next().unwrap_or(item).trim();
            level.parse::<log::LevelFilter>().ok()
        })
        .next_back()
        .unwrap_or(log::LevelFilter::Off)
}

/// Sends `log` records at or above `RUST_LOG`'s level to stderr (silent
/// when it is unset). Does nothing if the program already installed a
/// logger.
pub fn init_logging() {
    let level = std::env::var("RUST_LOG").map_or(log::LevelFilter::Off, |s| level_of(&s));
    if log::set_logger(&STDERR).is_ok() {
        log::set_max_level(level);
    }
}

#[cfg(test)]
mod tests {
    use super::level_of;
    use log::LevelFilter;

    #[test]
    fn rust_log_levels_are_read() {
        assert_eq!(level_of("info"), LevelFilter::Info);
        assert_eq!(level_of("ferrovia=debug"), LevelFilter::Debug);
        assert_eq!(level_of("warn,ferrovia_node=trace"), LevelFilter::Trace);
        assert_eq!(level_of("nonsense"), LevelFilter::Off);
        assert_eq!(level_of(""), LevelFilter::Off);
    }
}
