//! The backend seam: what the scoped core needs from a transport.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use crate::error::{TransportError, TransportResult};
use crate::op::{Completion, RecvOp, SendOp};

/// A set of reliable connections to peers (indexed `0..peers()`) sharing
/// one completion stream. Each backend implements it in its own crate:
/// verbs RC queue pairs in `ferrovia-verbs-transport`, UCX endpoints in
/// `ferrovia-ucx`.
///
/// Completions of one peer's send queue arrive in posting order, and an
/// unsignalled send is complete once a later send of the same peer
/// completes (RC semantics).
///
/// # Safety
/// The scoped core hands buffers back to safe code, and ends their
/// borrows, on the transport's word. An implementation promises that:
/// - a completion reported by `poll` or `wait` carries the `wr_id` of an
///   op posted through `post_send`/`post_recv` that is not yet reported,
///   and once it is reported the transport no longer reads or writes that
///   op's memory (nor, on a send queue, the memory of the unsignalled ops
///   posted before it to the same peer);
/// - ops are reported in posting order per peer and per queue, each once;
/// - a receive's `byte_len` is the number of bytes written into its SGEs,
///   never more than their total length;
/// - after `flush(peer)` returns `Ok`, every outstanding op of that peer
///   is reported (with a flush status if it did not complete) by later
///   `poll`/`wait` calls, and until then the transport touches only the
///   memory of ops not yet reported;
/// - `peers()`, `send_depth`, `recv_depth` and `max_inline` stay constant,
///   and the transport accepts as many outstanding ops as the depths say;
/// - an op's memory is accessed only as its kind says: sends and writes
///   read their SGEs, receives and reads write theirs (reads: at most their
///   total length), and SGE keys are honoured (an SGE outside the
///   registration its `lkey` names fails the op instead of touching
///   memory).
pub unsafe trait Transport: Send + Sync + std::any::Any {
    /// Number of peers.
    fn peers(&self) -> usize;
    /// Send-queue depth towards `peer`.
    fn send_depth(&self, peer: usize) -> u32;
    /// Receive-queue depth from `peer`.
    fn recv_depth(&self, peer: usize) -> u32;
    /// Largest inline payload towards `peer`.
    fn max_inline(&self, peer: usize) -> u32;

    /// Whether remote atomics (fetch-and-add and compare-and-swap on an
    /// 8-byte word) run towards every peer. Default: no.
    fn atomics(&self) -> bool {
        false
    }

    /// How many receives the shared pool holds; 0 (the default): no pool,
    /// receives are posted per peer. A transport with a pool takes every
    /// message from it.
    fn shared_recv_depth(&self) -> u32 {
        0
    }

    /// Posts receives to the shared pool; any peer's next message lands in
    /// one of them, and its completion names the sender in `peer`.
    ///
    /// # Safety
    /// As for [`Transport::post_recv`].
    unsafe fn post_shared_recv(&self, ops: &[RecvOp]) -> TransportResult<()> {
        let _ = ops;
        Err(TransportError::NoSharedPool)
    }

    /// Stops the shared pool once every peer has been flushed (the core
    /// calls it at a drain deadline): after `Ok(Reported)`, every shared
    /// receive not yet reported is reported by later `poll`/`wait` calls
    /// (with a flush status if nothing arrived); after `Ok(Silent)`, the
    /// transport never touches the memory of, nor reports, a shared receive
    /// it has not reported by the time it falls quiet.
    fn flush_shared(&self) -> TransportResult<SharedFlush> {
        Ok(SharedFlush::Reported)
    }

    /// Arms the pool's low watermark: once fewer than `limit` receives
    /// remain posted, [`Transport::shared_limit_reached`] says so once.
    fn arm_shared_limit(&self, limit: u32) -> TransportResult<()> {
        let _ = limit;
        Err(TransportError::NoSharedPool)
    }

    /// Whether the pool fell below its armed limit since it was armed
    /// (checking clears it).
    fn shared_limit_reached(&self) -> TransportResult<bool> {
        Ok(false)
    }

    /// A file descriptor an event loop can watch instead of polling:
    /// after [`Transport::arm`], it becomes readable once a completion
    /// arrives that was not yet available to `poll` when `arm` was called.
    /// `None` (the default): the transport has none, and an event loop
    /// polls it on a timer. See [`Transport::arm`] for the protocol.
    ///
    /// A transport that offers one makes progress on its own (the device,
    /// or a progress thread): completions reach `poll` without the caller
    /// polling first. The fd is the same, and open, for the transport's
    /// life; it is never read or written by the caller, only watched.
    fn event_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    /// Asks for the next completion to make [`Transport::event_fd`]
    /// readable (once). Completions that were already available when it was
    /// called may not, so a waiter follows the protocol:
    ///
    /// 1. poll until empty;
    /// 2. `arm`;
    /// 3. poll once more (a completion that slipped in before the arm is
    ///    caught here; if one did, go to 1);
    /// 4. sleep until the fd is readable (with a deadline: readiness may
    ///    also be spurious, never missing);
    /// 5. [`Transport::ack_events`], then go to 1.
    ///
    /// Default: nothing to arm.
    fn arm(&self) -> TransportResult<()> {
        Ok(())
    }

    /// Consumes what made [`Transport::event_fd`] readable, without
    /// blocking, so it reads as not ready until the transport is armed again
    /// and a completion arrives. Default: nothing to consume.
    fn ack_events(&self) -> TransportResult<()> {
        Ok(())
    }

    /// Replaces the connection to `peer` with a fresh one, for a
    /// connection a flush or an error left broken; returns what the peer's
    /// renewed side needs to connect to this one (handed to its
    /// [`Transport::connect_renewed`]). Called with nothing outstanding towards
    /// `peer`. The default: this transport cannot.
    fn renew(&self, peer: usize) -> TransportResult<Vec<u8>> {
        let _ = peer;
        Err(TransportError::Config(
            "this transport cannot renew a connection".into(),
        ))
    }

    /// Connects the renewed side of `peer` to the peer's renewed side,
    /// `theirs` (what its [`Transport::renew`] returned).
    fn connect_renewed(&self, peer: usize, theirs: &[u8]) -> TransportResult<()> {
        let _ = (peer, theirs);
        Err(TransportError::Config(
            "this transport cannot renew a connection".into(),
        ))
    }

    /// Messages this side dropped because they belong to a replaced
    /// connection (sent before a reconnect) or to one this side broke:
    /// a transport whose peers can deliver such messages (UCX) counts them;
    /// a verbs queue pair cannot receive them at all. The default: 0.
    fn stale_dropped(&self) -> u64 {
        0
    }

    /// The address of `peer`, if its connection was made by address and
    /// the peer is known to be gone (it disconnected, or its endpoint
    /// failed): work with it then fails as
    /// [`TransportError::Disconnected`], naming the address. A transport
    /// may read pending connection events to answer. The default: never.
    fn disconnected(&self, peer: usize) -> Option<std::net::SocketAddr> {
        let _ = peer;
        None
    }

    /// Revocations sent to `peer`: registrations whose key it had fetched
    /// were deregistered, and this side waited for its acknowledgement (a
    /// transport whose peers reach memory through keys it hands out
    /// itself, as UCX's directory does). For the core's
    /// [`stats`](crate::engine::ChannelCore::stats). The default: 0.
    fn revocations(&self, peer: usize) -> u64 {
        let _ = peer;
        0
    }

    /// Posts `ops` to `peer`'s send queue, in order (one doorbell where
    /// the transport has doorbells). Nothing from the failing op on is
    /// posted when it fails.
    ///
    /// # Safety
    /// Every SGE's memory must stay allocated until the op, or a later
    /// signalled op of the same peer, is reported complete or flushed.
    /// Until then the program must not touch a read's target at all, and
    /// may change a send's or write's source only by atomic stores to
    /// `Shared` memory (which the transport reads as it finds it, like
    /// DMA). The transport checks keys itself (see the trait's contract).
    unsafe fn post_send(&self, peer: usize, ops: &[SendOp]) -> TransportResult<()>;

    /// Posts `ops` as [`Transport::post_send`], then takes up to
    /// `out.len()` completions as [`Transport::poll`] does, without
    /// waiting and without driving progress: a transport that finishes
    /// ops inside the call (UCX on a same-host peer's mapped memory) hands
    /// their completions back at once, so the caller need not poll for
    /// them. Returns how many it took (the contract of `poll` holds for
    /// them). The default posts and takes none.
    ///
    /// # Safety
    /// As for [`Transport::post_send`].
    unsafe fn post_send_and_poll(
        &self,
        peer: usize,
        ops: &[SendOp],
        out: &mut [Completion],
    ) -> TransportResult<usize> {
        let _ = out;
        // SAFETY: the caller's contract is `post_send`'s.
        unsafe { self.post_send(peer, ops) }.map(|()| 0)
    }

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

/// What a transport does with the shared receives it still holds when
/// the pool is flushed ([`Transport::flush_shared`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedFlush {
    /// Each is reported, with a flush status if nothing arrived (UCX
    /// cancels its receives).
    Reported,
    /// Those not reported by the time the transport falls quiet are never
    /// touched nor reported (verbs: a shared receive queue's receives
    /// stay posted, but no QP, all in the error state, takes them).
    Silent,
}
