//! `UcxTransport`: the channel core's transport seam over UCX.

use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::{Arc, OnceLock, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrovia_channel::transport::{Completion, RecvOp, SendOp, SharedFlush, Transport};
use ferrovia_channel::{TransportError, TransportResult};

use crate::context::UcxContext;
use crate::engine::{self, Cmd, EngineCell, Shared};
use crate::error::UcxError;
use crate::keys::{KeyDirectory, UcxRegistrar};
use crate::local_addr;

#[cfg(feature = "test-hooks")]
mod test_hooks;
#[cfg(feature = "test-hooks")]
pub use test_hooks::{PostStats, ProgressStall};

/// How long `wait` polls before it sleeps.
const WAIT_SPIN: Duration = Duration::from_micros(50);

/// Reliable, ordered connections to peers over UCX (tcp, shared memory or
/// UCX's own RDMA transports), with verbs semantics: a send consumes one
/// posted receive of its peer, a message longer than that receive is a
/// length error, writes and reads go through the peer's key directory.
///
/// ```no_run
/// use std::sync::Arc;
/// use ferrovia_ucx::{UcxContext, UcxTransport};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let t = UcxTransport::new(&UcxContext::new()?)?;
/// let addresses = vec![t.address().to_vec()]; // every rank's, in rank order
/// t.connect(0, &addresses)?;
/// let registry = ferrovia_mr::MrRegistry::with_registrar(t.registrar());
/// let channel = ferrovia_channel::MultiChannel::over(Arc::new(t), registry, Default::default());
/// # Ok(())
/// # }
/// ```
pub struct UcxTransport {
    pub(crate) shared: Arc<Shared>,
    pub(crate) engine: EngineCell,
    pub(crate) thread: Option<JoinHandle<()>>,
    pub(crate) address: Vec<u8>,
    pub(crate) context: UcxContext,
    pub(crate) dir: Arc<KeyDirectory>,
    pub(crate) peers: OnceLock<usize>,
    /// The peer's address, for a connection made by address.
    pub(crate) peer_addr: Option<std::net::SocketAddr>,
    pub(crate) send_depth: u32,
    pub(crate) recv_depth: u32,
    pub(crate) shared_receives: u32,
}

impl std::fmt::Debug for UcxTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UcxTransport")
            .field("peers", &self.peers.get())
            .finish_non_exhaustive()
    }
}

impl UcxTransport {
    /// This side's worker address: what every peer passes to `connect`.
    pub fn address(&self) -> &[u8] {
        &self.address
    }

    /// Registers memory for this transport (and answers peers' key
    /// requests for it).
    pub fn registrar(&self) -> UcxRegistrar {
        UcxRegistrar::new(&self.context, self.dir.clone())
    }

    /// Creates an endpoint to every peer: `addresses[j]` is peer `j`'s
    /// worker address, and `me` this side's index (its own address is
    /// used for a loopback endpoint). Once only.
    pub fn connect(&self, me: usize, addresses: &[Vec<u8>]) -> Result<(), UcxError> {
        if self.peers.get().is_some() {
            return Err(UcxError::AlreadyConnected);
        }
        let (reply, rx) = mpsc::channel();
        self.shared.send(Cmd::Connect {
            me,
            addresses: addresses.to_vec(),
            reply,
        });
        rx.recv()
            .map_err(|_| UcxError::ProgressThread("exited during connect".into()))??;
        let _ = self.peers.set(addresses.len());
        Ok(())
    }

    /// Wakes the progress thread if it sleeps (after work issued from a
    /// user thread that it must progress).
    pub(crate) fn wake_progress(&self) {
        self.shared.wake(false);
    }

    /// Control messages received malformed (counted and dropped).
    pub fn malformed_messages(&self) -> u64 {
        self.shared.malformed.load(SeqCst)
    }

    /// Messages dropped because they belong to a replaced connection (one
    /// sent before a reconnect) or to one this side broke (see
    /// `Transport::stale_dropped`).
    pub fn stale_messages(&self) -> u64 {
        self.shared.stale.load(SeqCst)
    }

    fn check(&self, peer: usize) -> TransportResult<()> {
        let count = self.peers();
        if peer >= count {
            return Err(TransportError::NoSuchPeer { peer, count });
        }
        self.check_alive()
    }

    #[inline]
    fn check_alive(&self) -> TransportResult<()> {
        if self.shared.alive.load(SeqCst) {
            Ok(())
        } else {
            Err(TransportError::Backend(Box::new(UcxError::ProgressThread(
                "the progress thread stopped".into(),
            ))))
        }
    }

    /// Turns the engine on this thread if it is free and takes what
    /// completed into `out` (busy polling then costs no thread hand-off);
    /// `None` if someone else holds it.
    fn turn_and_take(&self, out: &mut [Completion]) -> Option<usize> {
        engine::with_engine(&self.engine, &self.shared, |e| {
            e.turn();
            e.take_completions(out)
        })
    }

    /// Takes published completions (those of turns on other threads).
    /// An event loop sleeping on the event fd will not poll for what a
    /// direct post completed inside the call (it stays in the engine for
    /// the posting thread's next poll): publish it, which signals the fd.
    fn publish_if_armed(&self, e: &mut engine::Engine) {
        if self.shared.events.armed() {
            e.publish();
        }
    }

    fn take(&self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        while n < out.len() {
            match self.shared.done.pop() {
                Some(c) => {
                    out[n] = c;
                    n += 1;
                }
                None => break,
            }
        }
        n
    }
}

// SAFETY: completions come only from the engine, which reports each op
// once, in posting order per peer and queue (`peer.rs` orders them), and
// only after UCX has reported the request complete or cancelled, so UCX no
// longer touches its buffers; a receive's byte_len is what UCX wrote,
// bounded by the posted length (a longer message is IBV_WC_LOC_LEN_ERR);
// `flush` force-closes the endpoint, and its pending ops are reported with
// a flush status only once UCX has released their buffers; depths are
// fixed at build; ops touch only their SGEs (puts and sends read them,
// gets and receives write at most their length), and remote ranges and
// rights are checked against the owner's directory before UCX sees them.
unsafe impl Transport for UcxTransport {
    fn peers(&self) -> usize {
        self.peers.get().copied().unwrap_or(0)
    }

    fn send_depth(&self, _peer: usize) -> u32 {
        self.send_depth
    }

    fn recv_depth(&self, _peer: usize) -> u32 {
        self.recv_depth
    }

    fn atomics(&self) -> bool {
        // UCP_FEATURE_AMO64: every transport runs them (in software where
        // the hardware does not).
        true
    }

    fn max_inline(&self, _peer: usize) -> u32 {
        // UCX copies small messages itself; nothing to gain from inline.
        0
    }

    unsafe fn post_send(&self, peer: usize, ops: &[SendOp]) -> TransportResult<()> {
        if local_addr::any_rebased(ops) {
            return local_addr::translated(&self.dir, ops, |ops| {
                // SAFETY: the same operations on the same bytes, their
                // elements now in this process's addresses; the caller's
                // contract carries over.
                unsafe { self.post_send(peer, ops) }
            });
        }
        self.check(peer)?;
        // Issued from this thread while it holds the engine: no command
        // hand-off. When another thread holds it, the ops queue as
        // commands, which the holder's next turn (or this thread's, whose
        // direct posts drain the queue first) issues in order.
        if engine::with_engine(&self.engine, &self.shared, |e| {
            e.post_sends(peer, ops);
            self.publish_if_armed(e);
        })
        .is_none()
        {
            self.check_alive()?;
            self.shared.queued_posts.fetch_add(1, Relaxed);
            for op in ops {
                self.shared.cmds.push(Cmd::Send { peer, op: *op });
            }
            self.shared.wake(false);
        }
        Ok(())
    }

    unsafe fn post_send_and_poll(
        &self,
        peer: usize,
        ops: &[SendOp],
        out: &mut [Completion],
    ) -> TransportResult<usize> {
        // One op the direct lane takes: done here, nothing else touched.
        if let ([op], [slot, ..]) = (ops, &mut *out)
            && self.shared.alive.load(Relaxed)
            && !local_addr::rebased(op.sges())
            && let Some(Some(n)) = engine::with_engine_unturned(&self.engine, &self.shared, |e| {
                e.lane_one(peer, op, slot)
            })
        {
            return Ok(n);
        }
        if local_addr::any_rebased(ops) {
            // SAFETY: the caller's contract is `post_send`'s.
            return unsafe { self.post_send(peer, ops) }.map(|()| 0);
        }
        self.check(peer)?;
        // As `post_send`, then what is ready (what the direct lane did in
        // the call among it) is taken under the same lock.
        match engine::with_engine(&self.engine, &self.shared, |e| {
            let n = e.post_and_take(peer, ops, out);
            self.publish_if_armed(e);
            n
        }) {
            Some(n) => Ok(n),
            None => {
                self.check_alive()?;
                self.shared.queued_posts.fetch_add(1, Relaxed);
                for op in ops {
                    self.shared.cmds.push(Cmd::Send { peer, op: *op });
                }
                self.shared.wake(false);
                Ok(0)
            }
        }
    }

    unsafe fn post_recv(&self, peer: usize, ops: &[RecvOp]) -> TransportResult<()> {
        if local_addr::any_rebased(ops) {
            return local_addr::translated(&self.dir, ops, |ops| {
                // SAFETY: as for sends.
                unsafe { self.post_recv(peer, ops) }
            });
        }
        self.check(peer)?;
        // As for sends.
        if engine::with_engine(&self.engine, &self.shared, |e| {
            e.post_recvs(peer, ops);
            self.publish_if_armed(e);
        })
        .is_none()
        {
            self.check_alive()?;
            self.shared.queued_posts.fetch_add(1, Relaxed);
            for op in ops {
                self.shared.cmds.push(Cmd::Recv { peer, op: *op });
            }
            self.shared.wake(false);
        }
        Ok(())
    }

    fn shared_recv_depth(&self) -> u32 {
        self.shared_receives
    }

    unsafe fn post_shared_recv(&self, ops: &[RecvOp]) -> TransportResult<()> {
        if local_addr::any_rebased(ops) {
            return local_addr::translated(&self.dir, ops, |ops| {
                // SAFETY: as for sends.
                unsafe { self.post_shared_recv(ops) }
            });
        }
        if self.shared_receives == 0 {
            return Err(TransportError::NoSharedPool);
        }
        // As for per-peer receives, with a wildcard sender.
        if engine::with_engine(&self.engine, &self.shared, |e| {
            e.post_pool_recvs(ops);
            self.publish_if_armed(e);
        })
        .is_none()
        {
            self.check_alive()?;
            self.shared.queued_posts.fetch_add(1, Relaxed);
            for op in ops {
                self.shared.cmds.push(Cmd::RecvAny { op: *op });
            }
            self.shared.wake(false);
        }
        Ok(())
    }

    /// Cancels the pool's receives: UCX reports each (a flush status if
    /// nothing arrived), and the pool takes receives again afterwards.
    fn flush_shared(&self) -> TransportResult<SharedFlush> {
        self.check_alive()?;
        self.engine.lock().cancel_pool();
        self.shared.wake(false);
        Ok(SharedFlush::Reported)
    }

    fn arm_shared_limit(&self, limit: u32) -> TransportResult<()> {
        self.check_alive()?;
        self.engine.lock().arm_pool_limit(limit);
        Ok(())
    }

    fn shared_limit_reached(&self) -> TransportResult<bool> {
        self.check_alive()?;
        Ok(self.engine.lock().pool_limit_hit())
    }

    /// Stops the endpoint to `peer` (see `engine::generation`); the link
    /// is the generation this side proposes for the new connection (4
    /// bytes, little-endian): the peer's worker address is unchanged.
    fn renew(&self, peer: usize) -> TransportResult<Vec<u8>> {
        self.check(peer)?;
        if let Some(addr) = self.peer_addr {
            return Err(TransportError::Config(format!(
                "the connection to {addr} was made by address: connect again instead of renewing"
            )));
        }
        self.check_alive()?;
        let proposed = self
            .engine
            .lock()
            .renew(peer)
            .map_err(|e| TransportError::Backend(Box::new(e)))?;
        self.shared.wake(false);
        Ok(proposed.to_le_bytes().to_vec())
    }

    /// Makes the new endpoint, of the generation both sides agree on (the
    /// larger proposal); UCX wires it up on first use. `theirs` is the
    /// peer's proposal (4 bytes, little-endian), followed, when the peer
    /// is a new process (one that took a dead rank's place), by its worker
    /// address, which the new endpoint connects to instead of the old.
    fn connect_renewed(&self, peer: usize, theirs: &[u8]) -> TransportResult<()> {
        self.check(peer)?;
        let (generation, address) = match theirs.split_first_chunk::<4>() {
            Some((g, rest)) => (
                u32::from_le_bytes(*g),
                (!rest.is_empty()).then(|| rest.to_vec()),
            ),
            None => {
                return Err(TransportError::Config(format!(
                    "peer {peer}'s renewed UCX link is {} bytes, not a 4-byte generation",
                    theirs.len()
                )));
            }
        };
        self.engine
            .lock()
            .reconnect(peer, generation, address)
            .map_err(|e| TransportError::Backend(Box::new(e)))?;
        self.shared.wake(false);
        Ok(())
    }

    fn stale_dropped(&self) -> u64 {
        self.shared.stale.load(SeqCst)
    }

    fn revocations(&self, peer: usize) -> u64 {
        self.dir.revocations(peer)
    }

    fn poll(&self, out: &mut [Completion]) -> TransportResult<usize> {
        if !self.shared.done.is_empty() {
            return Ok(self.take(out));
        }
        self.check_alive()?;
        match self.turn_and_take(out) {
            Some(n) => Ok(n),
            // Whoever holds the engine publishes what it completes.
            None => Ok(self.take(out)),
        }
    }

    fn wait(&self, out: &mut [Completion], timeout: Duration) -> TransportResult<usize> {
        let start = Instant::now();
        loop {
            let n = self.take(out);
            if n > 0 {
                return Ok(n);
            }
            self.check_alive()?;
            if start.elapsed() >= WAIT_SPIN.min(timeout) {
                break;
            }
            if let Some(n) = self.turn_and_take(out)
                && n > 0
            {
                return Ok(n);
            }
        }
        let deadline = start + timeout;
        self.shared.waiters.fetch_add(1, SeqCst);
        let result = loop {
            let mut guard = self.shared.lock.lock();
            let n = self.take(out);
            if n > 0 {
                break Ok(n);
            }
            if let Err(e) = self.check_alive() {
                break Err(e);
            }
            // Completions this thread's own posts left in the engine: no
            // other thread publishes them while this one sleeps, unless it
            // holds the engine, and then it does (and notifies, which
            // needs the lock held here until the wait releases it).
            let n = engine::take_left(&self.engine, out);
            if n > 0 {
                break Ok(n);
            }
            if Instant::now() >= deadline
                || self.shared.cv.wait_until(&mut guard, deadline).timed_out()
            {
                let n = self.take(out);
                break Ok(if n > 0 {
                    n
                } else {
                    engine::take_left(&self.engine, out)
                });
            }
        };
        self.shared.waiters.fetch_sub(1, SeqCst);
        result
    }

    fn disconnected(&self, peer: usize) -> Option<std::net::SocketAddr> {
        let addr = self.peer_addr?;
        self.engine.lock().peer_gone(peer).then_some(addr)
    }

    /// An eventfd the engine signals after the turn that delivered a
    /// completion (see `notify`): the worker's own fd is the progress
    /// thread's.
    fn event_fd(&self) -> Option<BorrowedFd<'_>> {
        self.shared.events.fd()
    }

    fn arm(&self) -> TransportResult<()> {
        self.shared.arm_events();
        Ok(())
    }

    fn ack_events(&self) -> TransportResult<()> {
        self.shared.events.ack();
        Ok(())
    }

    fn flush(&self, peer: usize) -> TransportResult<()> {
        let count = self.peers();
        if peer >= count {
            return Err(TransportError::NoSuchPeer { peer, count });
        }
        self.shared.send(Cmd::Flush { peer });
        Ok(())
    }
}

impl Drop for UcxTransport {
    fn drop(&mut self) {
        self.shared.cmds.push(Cmd::Shutdown);
        self.shared.wake(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
