//! The transport's own work requests (binding and invalidating memory
//! windows) on a peer's queue pair, beside the channel's: their
//! completions arrive on the same CQ, are recognised by their `wr_id`,
//! recorded here, and never reach the channel core.
//!
//! An internal `wr_id` has `u32::MAX` as its low half: the core's are a
//! slot index there, and no slot table is that long. Internal work is
//! posted only through `&MultiChannel` (no scope open, the channel is not
//! `Sync`), one at a time, and waited for, so it never takes send-queue
//! room the core counts on.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use ferrovia_channel::transport::Completion;

/// The low half of every internal `wr_id`.
const TAG: u64 = u32::MAX as u64;

/// Internal work in flight and the outcomes that arrived.
#[derive(Default)]
pub(crate) struct InternalOps {
    /// Requests posted and not yet seen complete: while 0, polling looks
    /// at no `wr_id` (one load per poll).
    outstanding: AtomicUsize,
    seq: AtomicU32,
    done: Mutex<Vec<Completion>>,
    /// Held while one internal request is posted and waited for.
    turn: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl InternalOps {
    /// One internal request at a time: held while it is posted and
    /// waited for.
    pub(crate) fn turn(&self) -> MutexGuard<'_, ()> {
        lock(&self.turn)
    }

    /// A fresh internal `wr_id`, counted as outstanding (before it is
    /// posted, so its completion is never mistaken for the core's).
    pub(crate) fn begin(&self) -> u64 {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        (u64::from(self.seq.fetch_add(1, Ordering::Relaxed)) << 32) | TAG
    }

    /// A request of [`InternalOps::begin`] that was not posted after all.
    pub(crate) fn abandon(&self) {
        self.outstanding.fetch_sub(1, Ordering::AcqRel);
    }

    /// Takes the internal completions out of the first `n` of `out`
    /// (keeping the order of the rest); returns how many remain.
    #[inline]
    pub(crate) fn filter(&self, out: &mut [Completion], n: usize) -> usize {
        if self.outstanding.load(Ordering::Acquire) == 0 {
            return n;
        }
        self.filter_slow(out, n)
    }

    #[cold]
    fn filter_slow(&self, out: &mut [Completion], n: usize) -> usize {
        let mut kept = 0;
        for i in 0..n {
            let c = out[i];
            if c.wr_id & TAG == TAG {
                lock(&self.done).push(c);
                self.outstanding.fetch_sub(1, Ordering::AcqRel);
            } else {
                out[kept] = c;
                kept += 1;
            }
        }
        kept
    }

    /// The completion of internal request `wr_id`, once it arrived.
    pub(crate) fn take(&self, wr_id: u64) -> Option<Completion> {
        let mut done = lock(&self.done);
        let i = done.iter().position(|c| c.wr_id == wr_id)?;
        Some(done.swap_remove(i))
    }
}
