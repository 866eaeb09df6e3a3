//! The gate between the reactor's turns and `Async::into_inner`.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

/// Keeps the reactor's turns out of `Async::into_inner`'s way. The
/// reactor upgrades its weak reference for every turn, so without the gate
/// a caller with nothing outstanding could find the engine shared for the
/// microseconds of a turn and be told `Err` (seen in CI over UCX tcp while
/// the reactor spun after activity).
///
/// A Dekker handshake on two flags: the reactor raises `busy` then reads
/// `closing`; the closer raises `closing` then reads `busy`. With `SeqCst`
/// at least one sees the other's flag, so a closed gate with `busy` down
/// means no turn holds the engine and none will start until it opens.
#[derive(Default)]
pub(crate) struct Gate {
    closing: AtomicBool,
    busy: AtomicBool,
}

impl Gate {
    pub(crate) fn enter(&self) -> bool {
        self.busy.store(true, SeqCst);
        if self.closing.load(SeqCst) {
            self.busy.store(false, SeqCst);
            return false;
        }
        true
    }

    pub(crate) fn leave(&self) {
        self.busy.store(false, SeqCst);
    }

    /// Stops new turns and waits for the one in progress (a turn never
    /// awaits, so it ends in microseconds; on a current-thread runtime none
    /// can be in progress at all).
    pub(crate) fn close(&self) {
        self.closing.store(true, SeqCst);
        while self.busy.load(SeqCst) {
            std::thread::yield_now();
        }
    }

    /// Lets turns run again (the reactor retries within a tick).
    pub(crate) fn open(&self) {
        self.closing.store(false, SeqCst);
    }
}
