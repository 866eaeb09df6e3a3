//! The shared receive pool of a verbs transport: one SRQ every queue
//! pair takes its receives from, the peer of each QP number (to name a
//! pooled receive's sender), and the SRQ's limit event.

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ferrovia_verbs::{AsyncEvent, Context, SharedReceiveQueue};

/// A shared receive queue every QP of the channel takes its receives from.
pub(crate) struct SharedPool {
    pub(crate) srq: SharedReceiveQueue,
    pub(crate) ctx: Context,
    /// (QP number, peer), sorted: names the sender of a shared receive.
    pub(crate) peer_of_qpn: RwLock<Vec<(u32, u32)>>,
    /// Set when a limit event arrived since the last check.
    pub(crate) limit_hit: AtomicBool,
    /// Set once `flush_shared` left receives in the SRQ that no QP may
    /// take: a renewed QP attached to it would.
    pub(crate) flushed: AtomicBool,
}

/// How long a flush of the pool waits for each QP's last-WQE event; a
/// device that raises none (soft-RoCE) has handed back the receives it
/// took well within it.
pub(crate) const LAST_WQE_WAIT: Duration = Duration::from_millis(200);

impl SharedPool {
    /// Reads the device's async events without waiting, up to `deadline`
    /// for the ones `want` asks for; remembers a limit event of our SRQ.
    pub(crate) fn read_events(
        &self,
        deadline: Duration,
        mut want: impl FnMut(&AsyncEvent) -> bool,
    ) {
        let start = std::time::Instant::now();
        loop {
            let left = deadline.saturating_sub(start.elapsed());
            match self.ctx.next_async_event(left) {
                Ok(Some(ev)) => {
                    if let AsyncEvent::SrqLimitReached { srq } = ev
                        && srq == self.srq.as_raw() as usize
                    {
                        self.limit_hit.store(true, Ordering::Relaxed);
                    }
                    tracing::debug!("async event: {ev:?}");
                    if !want(&ev) {
                        return;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!("reading the device's async events: {e}");
                    return;
                }
            }
        }
    }
}
