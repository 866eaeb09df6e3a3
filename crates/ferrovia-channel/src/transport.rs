//! The backend seam: what the scoped core needs from a transport.

use std::time::Duration;

use crate::error::TransportResult;
use crate::op::{Completion, RecvOp, SendOp};

/// A set of reliable connections to peers (indexed `0..peers()`) sharing
/// one completion stream. Verbs RC queue pairs implement it here; the UCX
/// transport implements it in `ferrovia-ucx`.
///
/// Completions of one peer's send queue arrive in posting order, and an
/// unsignalled send is complete once a later send of the same peer
/// completes (RC semantics).
pub trait Transport: Send + Sync {
    /// Number of peers.
    fn peers(&self) -> usize;
    /// Send-queue depth towards `peer`.
    fn send_depth(&self, peer: usize) -> u32;
    /// Receive-queue depth from `peer`.
    fn recv_depth(&self, peer: usize) -> u32;
    /// Largest inline payload towards `peer`.
    fn max_inline(&self, peer: usize) -> u32;

    /// Posts `ops` to `peer`'s send queue, in order (one doorbell where
    /// the transport has doorbells). Nothing from the failing op on is
    /// posted when it fails.
    ///
    /// # Safety
    /// Every SGE's memory must stay valid, and not be accessed in ways that
    /// race with the transport, until the op completes or is flushed.
    unsafe fn post_send(&self, peer: usize, ops: &[SendOp]) -> TransportResult<()>;

    /// Posts receives from `peer`.
    ///
    /// # Safety
    /// As for [`Transport::post_send`]; the memory is written.
    unsafe fn post_recv(&self, peer: usize, ops: &[RecvOp]) -> TransportResult<()>;

    /// Takes up to `out.len()` completions without blocking.
    fn poll(&self, out: &mut [Completion]) -> TransportResult<usize>;

    /// Takes at least one completion, sleeping up to `timeout`; `Ok(0)` on
    /// timeout.
    fn wait(&self, out: &mut [Completion], timeout: Duration) -> TransportResult<usize>;

    /// Stops all work towards `peer`: every outstanding op completes with
    /// a flush status, after which the transport no longer touches its
    /// buffers.
    fn flush(&self, peer: usize) -> TransportResult<()>;
}
