//! xtask's own lines on stdout. `println!` panics when stdout is closed
//! (`cargo xtask test | head`); `say!` ignores write errors instead, so
//! the run (and the VM cleanup) goes on.

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
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{args}").and_then(|()| out.flush());
}

/// Writes `data` to stdout as is and flushes; errors are ignored.
pub(crate) fn raw(data: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(data).and_then(|()| out.flush());
}
