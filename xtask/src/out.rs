//! xtask's own output. `println!` panics when stdout is closed (`cargo
//! xtask test | head`); these ignore write errors instead, so the run (and
//! the VM cleanup) goes on.

use std::fmt;
use std::io::Write;

/// `println!` that ignores a closed or failing stdout.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}

/// Writes `args` and a newline to stdout; errors (EPIPE...) are ignored.
pub(crate) fn line(args: fmt::Arguments<'_>) {
    Sink::Stdout.write(format!("{args}\n").as_bytes());
}

/// One of xtask's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sink {
    Stdout,
    Stderr,
}

impl Sink {
    /// Writes `data` as is and flushes at once: a child's output should
    /// appear live. Errors (our reader went away) are ignored.
    pub(crate) fn write(self, data: &[u8]) {
        let _ = match self {
            Sink::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(data).and_then(|()| out.flush())
            }
            Sink::Stderr => {
                let mut err = std::io::stderr().lock();
                err.write_all(data).and_then(|()| err.flush())
            }
        };
    }
}
