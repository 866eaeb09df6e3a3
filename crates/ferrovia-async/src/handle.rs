//! `Async<T>`: a `Node` or `MultiChannel` whose operations are futures.

use std::ops::Range;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use ferrovia_channel::engine::OwnedOp;
use ferrovia_channel::{AtomicOp, Returned};
use ferrovia_mr::{MrRegistry, RegisteredBuffer, RemoteMemoryRegion};

use crate::buffer::{OpBuffer, Source};
use crate::config::AsyncConfig;
use crate::engine::{Engine, Inner, Target, with};
use crate::error::AsyncError;
use crate::op::Op;
use crate::op_list::OpList;
use crate::reactor;

/// A [`Node`](ferrovia_node::Node) or
/// [`MultiChannel`](ferrovia_channel::MultiChannel) whose operations are
/// futures that own their buffers. Cheap to clone (one engine, one
/// reactor); `Send` and `Sync`, so its futures run on any tokio runtime.
///
/// Every operation takes its registered buffer by value and hands it back
/// in its [`Done`](crate::Done) or [`Failed`](crate::Failed); see [`Op`]
/// for what dropping or forgetting one does. Scopes are locked out of the
/// target's engine for good (`run_scope` over it fails with `Nested`): a
/// scope's drain would settle the futures' requests behind their backs.
///
/// # Dropping
///
/// The engine (and the target) drops with the last handle and the last
/// operation future (each holds it), on whichever thread drops it, a
/// runtime worker included. With requests outstanding (those of dropped
/// or forgotten futures) that drop blocks, because no buffer may be freed
/// while the device or UCX may still touch it:
///
/// - receives and reads: their peers are flushed at once (nobody is left
///   to take their bytes), and the drop waits for the flush reports,
///   milliseconds over verbs and UCX tcp;
/// - sends, writes and atomics carry something to the peer, so the drop
///   waits for them, up to the channel's drain deadline (10 s by default:
///   a peer that is gone but not detected costs all of it), then flushes
///   their peers;
/// - then at most 2 s more for flush reports; the buffer of a request
///   never reported is leaked, never freed.
///
/// To end without blocking a runtime thread, call [`Async::shutdown`]
/// first: the same steps, waiting asynchronously, and a report of what
/// was flushed. The drop then finds nothing outstanding.
pub struct Async<T: Target> {
    pub(crate) inner: Arc<Inner<T>>,
}

impl<T: Target> Clone for Async<T> {
    fn clone(&self) -> Self {
        Async {
            inner: self.inner.clone(),
        }
    }
}

impl<T: Target> std::fmt::Debug for Async<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Async")
            .field("peers", &self.inner.peers)
            .field("config", &self.inner.cfg)
            .finish_non_exhaustive()
    }
}

impl<T: Target> Async<T> {
    /// What the engine underneath did with each peer until now (see
    /// [`ChannelStats`](ferrovia_channel::ChannelStats)). Takes the
    /// engine's lock for the snapshot.
    pub fn stats(&self) -> ferrovia_channel::ChannelStats {
        self.inner.target.lock().core().stats()
    }

    /// Takes over `target` with the default configuration (sleeping on
    /// the transport's event fd). Call inside a tokio runtime with IO and
    /// time enabled: it spawns the engine's reactor task.
    pub fn new(target: T) -> Result<Async<T>, AsyncError> {
        Self::with_config(target, AsyncConfig::default())
    }

    /// Takes over `target` with `cfg`.
    pub fn with_config(target: T, cfg: AsyncConfig) -> Result<Async<T>, AsyncError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| AsyncError::NoRuntime)?;
        let core = target.core();
        if !core.lock_out_scopes() {
            return Err(AsyncError::ScopeOpen);
        }
        let fd: Option<OwnedFd> = match core.event_fd().map(|fd| fd.try_clone_to_owned()) {
            Some(Ok(fd)) => Some(fd),
            Some(Err(e)) => {
                tracing::warn!(
                    "ferrovia-async: cannot duplicate the event fd ({e}); polling instead"
                );
                None
            }
            None => None,
        };
        let wake = cfg.wake;
        let inner = Arc::new(Inner::new(target, cfg));
        let engine: Arc<dyn Engine> = inner.clone();
        let weak = Arc::downgrade(&engine);
        drop(engine);
        runtime.spawn(reactor::run(
            weak,
            fd,
            inner.poke.0.clone(),
            wake,
            inner.fd_wakes.clone(),
            inner.gate.clone(),
        ));
        Ok(Async { inner })
    }

    /// Gives the target back, its scopes allowed again, when this is the
    /// last handle, no operation future is alive and nothing is
    /// outstanding (call [`Async::shutdown`] first); else `Err(self)`,
    /// unchanged.
    pub fn into_inner(self) -> Result<T, Async<T>> {
        if with(&*self.inner, |core| core.outstanding()) > 0 {
            return Err(self);
        }
        // The reactor holds the engine during each turn: keep it out while
        // looking, so "nothing outstanding, no other handle" is enough.
        let gate = self.inner.gate.clone();
        gate.close();
        let taken = Arc::try_unwrap(self.inner);
        gate.open();
        match taken {
            Ok(inner) => {
                let target = inner.into_target();
                // Nothing is outstanding and no one else holds the engine.
                let readmitted = target.core().readmit_scopes();
                debug_assert!(readmitted);
                Ok(target)
            }
            Err(inner) => Err(Async { inner }),
        }
    }

    fn engine(&self) -> Arc<dyn Engine> {
        self.inner.clone()
    }

    fn op<B: OpBuffer>(&self, op: OwnedOp, range: Range<usize>) -> Op<B> {
        Op::start(self.engine(), op, range)
    }

    /// Number of peers.
    pub fn peers(&self) -> usize {
        self.inner.peers
    }

    /// The registry to register buffers with.
    pub fn registry(&self) -> &MrRegistry {
        &self.inner.registry
    }

    /// The configuration.
    pub fn config(&self) -> &AsyncConfig {
        &self.inner.cfg
    }

    /// Runs `f` on the target under the engine's lock (briefly: the
    /// reactor and every future wait for it). Do not block in it, and do
    /// not call this engine's own methods or drop its barriers in it (the
    /// lock is not reentrant; a dropped operation is settled later).
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.inner.target.lock())
    }

    /// Sends all of `src` to `peer` as one message.
    pub fn send<B: Source>(&self, peer: usize, src: B) -> Op<B> {
        let range = 0..buf_len(&src);
        self.send_range(peer, src, range)
    }

    /// Sends `range` of `src` to `peer`.
    pub fn send_range<B: Source>(&self, peer: usize, src: B, range: Range<usize>) -> Op<B> {
        self.op(OwnedOp::send(peer, src.into_owned(), range.clone()), range)
    }

    /// Sends `range` of `src` to `peer` with immediate data `imm`.
    pub fn send_with_imm<B: Source>(
        &self,
        peer: usize,
        src: B,
        range: Range<usize>,
        imm: u32,
    ) -> Op<B> {
        let op = OwnedOp::send(peer, src.into_owned(), range.clone()).with_imm(imm);
        self.op(op, range)
    }

    /// Receives `peer`'s next message into `dst`; [`Done::received`](crate::Done::received)
    /// gives the bytes that arrived.
    pub fn receive(&self, peer: usize, dst: RegisteredBuffer) -> Op<RegisteredBuffer> {
        let range = 0..dst.len();
        self.receive_range(peer, dst, range)
    }

    /// Receives `peer`'s next message into `range` of `dst`.
    pub fn receive_range(
        &self,
        peer: usize,
        dst: RegisteredBuffer,
        range: Range<usize>,
    ) -> Op<RegisteredBuffer> {
        self.op(OwnedOp::receive(peer, dst, range.clone()), range)
    }

    /// Receives any peer's next message from the shared receive pool into
    /// `dst` (a target built with `ChannelBuilder::shared_receives(n)`,
    /// which takes every message there); [`Done::peer`](crate::Done::peer)
    /// names the sender, [`Done::received`](crate::Done::received) gives
    /// the bytes. The future owns the buffer as [`Async::receive`]'s
    /// does: dropped, its receive stays in the pool and takes a later
    /// message from whichever peer, which then waits in
    /// [`Async::take_returned`] with its completion (naming the sender);
    /// the abandoned deadline does not apply (the pool has no peer to
    /// flush), [`Async::shutdown`] and the engine's drop flush it.
    /// Without a pool it fails with [`TransportError::NoSharedPool`](ferrovia_channel::TransportError::NoSharedPool),
    /// the buffer handed back.
    pub fn receive_any(&self, dst: RegisteredBuffer) -> Op<RegisteredBuffer> {
        let range = 0..dst.len();
        self.receive_any_range(dst, range)
    }

    /// Receives any peer's next message from the shared pool into `range`
    /// of `dst` (see [`Async::receive_any`]).
    pub fn receive_any_range(
        &self,
        dst: RegisteredBuffer,
        range: Range<usize>,
    ) -> Op<RegisteredBuffer> {
        self.op(OwnedOp::receive_any(dst, range.clone()), range)
    }

    /// Writes all of `src` to the start of `remote` at `peer`.
    pub fn write<B: Source>(&self, peer: usize, src: B, remote: RemoteMemoryRegion) -> Op<B> {
        let range = 0..buf_len(&src);
        self.write_range(peer, src, range, remote)
    }

    /// Writes `range` of `src` to the start of `remote` at `peer`.
    pub fn write_range<B: Source>(
        &self,
        peer: usize,
        src: B,
        range: Range<usize>,
        remote: RemoteMemoryRegion,
    ) -> Op<B> {
        self.op(
            OwnedOp::write(peer, src.into_owned(), range.clone(), remote),
            range,
        )
    }

    /// Writes `range` of `src` to `remote` at `peer`, then delivers `imm`
    /// to a receive the peer posted (it consumes one).
    pub fn write_with_imm<B: Source>(
        &self,
        peer: usize,
        src: B,
        range: Range<usize>,
        remote: RemoteMemoryRegion,
        imm: u32,
    ) -> Op<B> {
        let op = OwnedOp::write(peer, src.into_owned(), range.clone(), remote).with_imm(imm);
        self.op(op, range)
    }

    /// Reads the start of `remote` at `peer` into all of `dst`.
    pub fn read(
        &self,
        peer: usize,
        dst: RegisteredBuffer,
        remote: RemoteMemoryRegion,
    ) -> Op<RegisteredBuffer> {
        let range = 0..dst.len();
        self.read_range(peer, dst, range, remote)
    }

    /// Reads the start of `remote` at `peer` into `range` of `dst`.
    pub fn read_range(
        &self,
        peer: usize,
        dst: RegisteredBuffer,
        range: Range<usize>,
        remote: RemoteMemoryRegion,
    ) -> Op<RegisteredBuffer> {
        self.op(OwnedOp::read(peer, dst, range.clone(), remote), range)
    }

    /// Adds `add` to the 8-byte word at the start of `remote` at `peer`;
    /// the word's original value lands in `result[range]` (8 bytes) and
    /// comes back as [`Done::original_value`](crate::Done::original_value).
    pub fn fetch_add(
        &self,
        peer: usize,
        result: RegisteredBuffer,
        range: Range<usize>,
        remote: RemoteMemoryRegion,
        add: u64,
    ) -> Op<RegisteredBuffer> {
        let op = OwnedOp::atomic(
            peer,
            result,
            range.clone(),
            remote,
            AtomicOp::FetchAdd { add },
        );
        self.op(op, range)
    }

    /// Stores `swap` into the word at the start of `remote` at `peer` if
    /// it equals `compare`; its original value comes back either way.
    pub fn compare_swap(
        &self,
        peer: usize,
        result: RegisteredBuffer,
        range: Range<usize>,
        remote: RemoteMemoryRegion,
        compare: u64,
        swap: u64,
    ) -> Op<RegisteredBuffer> {
        let op = OwnedOp::atomic(
            peer,
            result,
            range.clone(),
            remote,
            AtomicOp::CompareSwap { compare, swap },
        );
        self.op(op, range)
    }

    /// Writes each `(src, range, remote)` to `peer`, as lists: one
    /// doorbell per 16 and selective signalling (the scoped path's
    /// `post_write_list`), and one future for them all that resolves to
    /// each one's result and buffer, in order. For bandwidth: one by one,
    /// each costs a doorbell (on soft-RoCE a system call, on UCX an engine
    /// turn) and a future.
    pub fn write_list<B: Source>(
        &self,
        peer: usize,
        items: impl IntoIterator<Item = (B, Range<usize>, RemoteMemoryRegion)>,
    ) -> OpList<B> {
        self.list(items.into_iter().map(|(src, range, remote)| {
            let op = OwnedOp::write(peer, src.into_owned(), range.clone(), remote);
            (op, range)
        }))
    }

    /// Sends each `(src, range)` to `peer`, as lists (see
    /// [`Async::write_list`]).
    pub fn send_list<B: Source>(
        &self,
        peer: usize,
        items: impl IntoIterator<Item = (B, Range<usize>)>,
    ) -> OpList<B> {
        self.list(
            items
                .into_iter()
                .map(|(src, range)| (OwnedOp::send(peer, src.into_owned(), range.clone()), range)),
        )
    }

    fn list<B: OpBuffer>(&self, ops: impl Iterator<Item = (OwnedOp, Range<usize>)>) -> OpList<B> {
        let (ops, ranges) = ops.unzip();
        OpList::start(self.engine(), ops, ranges)
    }

    /// The buffers of operations whose futures were dropped before they
    /// completed, each with its completion (a flush status if it was
    /// flushed), now that the device is done with them.
    pub fn take_returned(&self) -> Vec<Returned> {
        let mut out = Vec::new();
        with(&*self.inner, |core| core.take_returned(&mut out));
        out
    }

    /// How often the reactor woke because the transport's event fd was
    /// readable: kernel wake-ups, not timer ticks or spinning.
    pub fn event_wakes(&self) -> u64 {
        self.inner
            .fd_wakes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Requests posted and not yet completed (dropped ones included).
    pub fn outstanding(&self) -> usize {
        with(&*self.inner, |core| core.outstanding())
    }

    /// Whether `peer`'s connection is known broken (a request to it failed,
    /// or it was flushed); operations to it then fail at once.
    pub fn is_broken(&self, peer: usize) -> bool {
        with(&*self.inner, |core| core.is_broken(peer))
    }
}

fn buf_len<B: OpBuffer>(b: &B) -> usize {
    b.len()
}
