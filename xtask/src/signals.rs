//! Turning SIGINT/SIGTERM/SIGHUP into a flag, so that a Ctrl-C or a `kill` of
//! xtask still runs the cleanup (kill qemu, remove run directories) instead
//! of dying on the spot.

use std::sync::atomic::{AtomicI32, Ordering};

use crate::failure::{Failure, Result};

static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn remember(signal: libc::c_int) {
    // Only an atomic store: the one thing that is async-signal-safe here.
    RECEIVED.store(signal, Ordering::SeqCst);
}

/// From now on SIGINT, SIGTERM and SIGHUP only set the flag read by
/// [`received`]; long-running loops must poll it.
pub(crate) fn catch_termination() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let handler = remember as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: `remember` is an `extern "C" fn(c_int)` that only performs an
        // atomic store, which is async-signal-safe; replacing the disposition
        // of these signals affects nothing else in this process.
        unsafe {
            libc::signal(signal, handler);
        }
    }
}

/// A failure if a termination signal arrived since
/// [`catch_termination`]: "stopped by signal N", with exit status 128 + N
/// as a shell would report it.
pub(crate) fn check() -> Result<()> {
    match received() {
        Some(signal) => Err(Failure::with_status(
            format!("stopped by signal {signal}"),
            128 + signal as u8,
        )),
        None => Ok(()),
    }
}

/// The termination signal received since [`catch_termination`], if any.
pub(crate) fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}
