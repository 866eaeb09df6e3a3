//! Hooks for this crate's own tests (feature `test-hooks`, which only the
//! crate's dev-dependency on itself turns on): raw control messages, a
//! stalled progress thread, the posting paths' counters.

use std::sync::atomic::Ordering::SeqCst;

use crate::engine::Cmd;
use crate::transport::UcxTransport;

impl UcxTransport {
    /// Sends raw bytes on the control channel to `peer`: for tests that a
    /// malformed message is dropped and counted.
    ///
    /// # Safety
    /// `bytes` must not be a well-formed key reply: a peer that asked for
    /// that key would hand its packed rkey to `ucp_ep_rkey_unpack`, which
    /// takes no length and trusts the bytes.
    pub unsafe fn send_raw_control(&self, peer: usize, bytes: Vec<u8>) {
        self.shared.send(Cmd::RawControl { peer, bytes });
    }

    /// Stops this transport's progress (no thread turns its worker) until
    /// the returned guard drops: for tests of a peer that stops answering.
    pub fn stall_progress(&self) -> ProgressStall<'_> {
        ProgressStall {
            _engine: self.engine.lock(),
        }
    }

    /// How posts reached the worker so far (tests of the posting paths).
    pub fn post_stats(&self) -> PostStats {
        let e = self.engine.lock();
        PostStats {
            direct: e.stats.direct_posts,
            queued: self.shared.queued_posts.load(SeqCst),
            endpoint_flushes: e.stats.endpoint_flushes,
            mapped: e.stats.mapped_accesses,
        }
    }
}

/// Counts of a transport's posting paths (tests only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostStats {
    /// `post_send`/`post_recv` calls issued by the calling thread itself.
    pub direct: u64,
    /// Calls whose ops went through the command queue (the engine was
    /// busy).
    pub queued: u64,
    /// Endpoint flushes issued to complete writes.
    pub endpoint_flushes: u64,
    /// Ops done directly on a same-host peer's mapped memory.
    pub mapped: u64,
}

/// Holds a transport's engine so nothing progresses it (tests only).
#[must_use]
pub struct ProgressStall<'a> {
    _engine: parking_lot::MutexGuard<'a, crate::engine::Engine>,
}

impl std::fmt::Debug for ProgressStall<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressStall")
    }
}
