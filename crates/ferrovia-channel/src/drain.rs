//! The end of every scope: complete or flush everything outstanding, and
//! report what failed unobserved.

use std::time::{Duration, Instant};

use ferrovia_types::WcStatus;

use crate::core::ChannelCore;
use crate::error::DrainError;
use crate::slots::error_of;

/// How long flushed work may take to report back before the process is
/// aborted rather than letting a borrow end under live DMA.
const FLUSH_GRACE: Duration = Duration::from_secs(30);

impl ChannelCore {
    fn pending(&self) -> usize {
        self.state().slots.pending()
    }

    /// Completes or flushes everything outstanding; frees every slot. On
    /// return the transport no longer touches any buffer of the scope.
    pub(crate) fn drain(
        &self,
        deadline: Duration,
        unpolled_is_error: bool,
    ) -> Result<(), DrainError> {
        let start = Instant::now();
        let mut err = DrainError {
            failed: Vec::new(),
            flushed: Vec::new(),
            deadline,
            unpolled: 0,
        };
        while self.pending() > 0 {
            let left = deadline.saturating_sub(start.elapsed());
            if left.is_zero() {
                break;
            }
            if self.wait_progress(left).is_err() {
                break; // a CQ that cannot be waited on: flush below
            }
        }
        if self.pending() > 0 {
            self.flush_outstanding(&mut err);
        }
        let mut st = self.state();
        let slots = &mut st.slots;
        if unpolled_is_error {
            err.unpolled += slots.dropped_unpolled;
        }
        slots.dropped_unpolled = 0;
        let flushed = &err.flushed;
        err.failed.extend(
            slots
                .unobserved
                .drain(..)
                .filter(|e| !flushed.contains(&e.wr_id)),
        );
        let done: Vec<_> = slots.done_slots().collect();
        for (index, c) in done {
            if c.status != WcStatus::SUCCESS && !err.flushed.contains(&c.wr_id) {
                err.failed
                    .push(error_of(&c, slots.meta[index as usize].peer));
            }
            if unpolled_is_error {
                err.unpolled += 1;
            }
            slots.release(index);
        }
        if err.failed.is_empty() && err.flushed.is_empty() && err.unpolled == 0 {
            Ok(())
        } else {
            Err(err)
        }
    }

    /// Moves every peer with outstanding work to the error state and waits
    /// for the flush completions. Aborts the process if they never come:
    /// returning would end borrows the device may still write.
    fn flush_outstanding(&self, err: &mut DrainError) {
        let pending: Vec<(usize, u64)> = self.state().slots.pending_ids().collect();
        let mut peers: Vec<usize> = pending.iter().map(|&(p, _)| p).collect();
        peers.sort_unstable();
        peers.dedup();
        err.flushed = pending.iter().map(|&(_, id)| id).collect();
        log::warn!(
            "scope drain deadline passed: flushing {} outstanding request(s) to peer(s) {peers:?}",
            err.flushed.len()
        );
        for &p in &peers {
            self.state().broken[p] = true;
            if let Err(e) = self.transport.flush(p) {
                eprintln!(
                    "ferrovia: cannot flush peer {p} ({e}); aborting rather than freeing buffers under DMA"
                );
                std::process::abort();
            }
        }
        let start = Instant::now();
        while self.pending() > 0 {
            let left = FLUSH_GRACE.saturating_sub(start.elapsed());
            if left.is_zero() || self.wait_progress(left).is_err() {
                eprintln!(
                    "ferrovia: {} flushed request(s) never completed; aborting rather than freeing buffers under DMA",
                    self.pending()
                );
                std::process::abort();
            }
        }
    }
}
