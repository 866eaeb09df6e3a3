//! The end of every scope: complete or flush everything outstanding, and
//! report what failed unobserved.

use std::time::{Duration, Instant};

use ferrovia_types::WcStatus;

use crate::core::ChannelCore;
use crate::error::DrainError;
use crate::seam::SharedFlush;
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
                err.failed.push(error_of(&c));
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

    /// Moves every peer with outstanding work to the error state (and
    /// stops the shared receive pool if it holds receives), then waits for
    /// the flush completions. Aborts the process if they never come:
    /// returning would end borrows the device may still write.
    fn flush_outstanding(&self, err: &mut DrainError) {
        let (pending, shared): (Vec<(usize, u64)>, Vec<u64>) = {
            let st = self.state();
            (
                st.slots.pending_ids().collect(),
                st.slots.shared_ids().collect(),
            )
        };
        let mut peers: Vec<usize> = pending.iter().map(|&(p, _)| p).collect();
        peers.sort_unstable();
        peers.dedup();
        err.flushed = pending
            .iter()
            .map(|&(_, id)| id)
            .chain(shared.iter().copied())
            .collect();
        let _span = tracing::warn_span!(
            "scope_flush",
            peers = ?peers,
            requests = pending.len(),
            shared_receives = shared.len()
        )
        .entered();
        tracing::warn!(
            "scope drain deadline passed: flushing {} outstanding request(s) to peer(s) {peers:?} and {} shared receive(s)",
            pending.len(),
            shared.len()
        );
        for &p in &peers {
            tracing::warn!(peer = p, "flushing the connection (error state)");
            let mut st = self.state();
            st.broken[p] = true;
            st.counters.flushed(p);
            drop(st);
            if let Err(e) = self.transport.flush(p) {
                abort(&format!("cannot flush peer {p} ({e})"));
            }
        }
        let silent = !shared.is_empty() && self.flush_pool();
        let start = Instant::now();
        let left = || FLUSH_GRACE.saturating_sub(start.elapsed());
        let outstanding = || {
            let st = self.state();
            let s = &st.slots;
            if silent {
                s.pending() - s.outstanding_shared as usize
            } else {
                s.pending()
            }
        };
        while outstanding() > 0 {
            if left().is_zero() || self.wait_progress(left()).is_err() {
                abort(&format!(
                    "{} flushed request(s) never completed",
                    outstanding()
                ));
            }
        }
        if silent {
            // Whatever a QP took from the pool before it stopped is
            // reported by now or in the next moment: collect it, then give
            // the rest back, which the transport will never touch.
            self.release_silent_pool(None);
        }
        tracing::debug!(
            took_us = start.elapsed().as_micros() as u64,
            "every flushed request completed"
        );
    }

    /// Stops the shared pool; whether its receives stay silent (so the
    /// core gives them back itself) rather than being reported.
    fn flush_pool(&self) -> bool {
        match self.stop_pool() {
            Ok(silent) => silent,
            Err(e) => abort(&format!("cannot flush the shared receive pool ({e})")),
        }
    }

    /// Stops the shared pool (see [`Transport::flush_shared`](crate::transport::Transport::flush_shared));
    /// whether its receives stay silent. A silent stop leaves every
    /// connection in the error state and the pool taking no more.
    pub(crate) fn stop_pool(&self) -> crate::TransportResult<bool> {
        match self.transport.flush_shared()? {
            SharedFlush::Reported => Ok(false),
            SharedFlush::Silent => {
                let mut st = self.state();
                st.broken.iter_mut().for_each(|b| *b = true);
                st.shared_broken = true;
                Ok(true)
            }
        }
    }

    /// Collects what the transport still reports after a silent pool
    /// flush until the completion stream has been quiet for
    /// [`SHARED_QUIET`], then gives the pool's receives back: the
    /// transport never touches them again. If it is not quiet within
    /// `bound`, gives nothing back (false).
    pub(crate) fn release_silent_pool(&self, bound: Option<Duration>) -> bool {
        let start = Instant::now();
        loop {
            if bound.is_some_and(|b| start.elapsed() >= b) {
                return false;
            }
            match self.wait_progress(SHARED_QUIET) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        self.state().slots.drop_shared();
        true
    }
}

/// How long the completion stream must stay quiet after a silent pool
/// flush before the pool's receives are given back.
pub(crate) const SHARED_QUIET: Duration = Duration::from_millis(50);

fn abort(why: &str) -> ! {
    eprintln!("ferrovia: {why}; aborting rather than freeing buffers under DMA");
    std::process::abort();
}
