//! The engine behind every scope: posting into slots, routing
//! completions, waiting with deadlines, draining and flushing.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrovia_verbs::{Sge, WcStatus};

use crate::config::ChannelConfig;
use crate::element::Gather;
use crate::error::{DrainError, TransportError, TransportResult};
use crate::op::{Completion, OpKind, RecvOp, SendOp};
use crate::request::{MAX_ELEMENTS, Scatters, SendWorkRequest, WriteWorkRequest};
use crate::slots::{Queue, RawBuf, Slots, State, error_of, wr_id};
use crate::transport::Transport;

/// Completions routed per progress call.
const BATCH: usize = 32;
/// How long flushed work may take to report back before the process is
/// aborted rather than letting a borrow end under live DMA.
const FLUSH_GRACE: Duration = Duration::from_secs(30);

/// The shared engine of [`Channel`](crate::Channel),
/// [`MultiChannel`](crate::MultiChannel) and anything built on them.
/// Opaque; reached through [`ScopeTarget`](crate::ScopeTarget).
pub struct ChannelCore {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) slots: RefCell<Slots>,
    /// Where polled completions land: kept, so polling zeroes nothing.
    batch: RefCell<[Completion; BATCH]>,
    broken: RefCell<Vec<bool>>,
    pub(crate) cfg: ChannelConfig,
    max_inline: Vec<u32>,
}

/// What a posted request's handle refers to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket {
    pub(crate) index: u32,
    pub(crate) epoch: u32,
}

impl Ticket {
    pub(crate) fn wr_id(&self) -> u64 {
        wr_id(self.index, self.epoch)
    }
}

/// What a send-queue request does, before it has a wr_id.
pub(crate) struct SendSpec<'a, 'env> {
    pub(crate) kind: OpKind,
    pub(crate) gather: &'a [Gather<'env>],
    pub(crate) remote: Option<(u64, u32)>,
    pub(crate) imm: Option<u32>,
}

impl<'a, 'env> SendSpec<'a, 'env> {
    pub(crate) fn send(wr: &SendWorkRequest<'a, 'env>) -> Self {
        SendSpec {
            kind: OpKind::Send,
            gather: wr.gather,
            remote: None,
            imm: wr.imm,
        }
    }

    pub(crate) fn write(wr: &WriteWorkRequest<'a, 'env>) -> Self {
        SendSpec {
            kind: OpKind::Write,
            gather: wr.gather,
            remote: Some((wr.remote.addr(), wr.remote.rkey())),
            imm: wr.imm,
        }
    }
}

impl ChannelCore {
    /// An engine over `transport`: what [`Channel`](crate::Channel) and
    /// [`MultiChannel`](crate::MultiChannel) are built on, and what other
    /// transports (UCX) or test doubles build on.
    pub fn new(transport: Arc<dyn Transport>, cfg: ChannelConfig) -> ChannelCore {
        let peers = transport.peers();
        let sends: Vec<u32> = (0..peers).map(|p| transport.send_depth(p)).collect();
        let recvs: Vec<u32> = (0..peers).map(|p| transport.recv_depth(p)).collect();
        let max_inline = (0..peers).map(|p| transport.max_inline(p)).collect();
        ChannelCore {
            slots: RefCell::new(Slots::new(&sends, &recvs)),
            batch: RefCell::new([Completion::default(); BATCH]),
            broken: RefCell::new(vec![false; peers]),
            transport,
            cfg,
            max_inline,
        }
    }

    pub(crate) fn peers(&self) -> usize {
        self.transport.peers()
    }

    fn check_peer(&self, peer: usize) -> TransportResult<()> {
        let count = self.peers();
        if peer >= count {
            return Err(TransportError::NoSuchPeer { peer, count });
        }
        if self.broken.borrow()[peer] {
            return Err(TransportError::Broken { peer });
        }
        Ok(())
    }

    /// Stops all work towards `peer` (its connection goes to the error
    /// state, outstanding requests complete with a flush status); posting
    /// to it fails with [`TransportError::Broken`] until it is reconnected.
    /// For a peer known to be dead, so nothing waits on it.
    pub fn flush_peer(&self, peer: usize) -> TransportResult<()> {
        let count = self.peers();
        if peer >= count {
            return Err(TransportError::NoSuchPeer { peer, count });
        }
        self.broken.borrow_mut()[peer] = true;
        log::warn!("flushing the connection to peer {peer}");
        self.transport.flush(peer)
    }

    /// Whether `peer`'s connection is known broken (a request to it failed,
    /// or it was flushed): posting to it fails with
    /// [`TransportError::Broken`]. False for a peer out of range.
    pub fn is_broken(&self, peer: usize) -> bool {
        self.broken.borrow().get(peer).copied().unwrap_or(false)
    }

    /// Marks a peer usable again after it was reconnected.
    pub(crate) fn mark_connected(&self, peer: usize) {
        if let Some(b) = self.broken.borrow_mut().get_mut(peer) {
            *b = false;
        }
    }

    /// Waits (routing completions) until `peer`'s queue has room and a slot
    /// is free.
    fn reserve(&self, peer: usize, queue: Queue) -> TransportResult<()> {
        let depth = match queue {
            Queue::Send => self.transport.send_depth(peer),
            Queue::Recv => self.transport.recv_depth(peer),
        };
        let room = |s: &Slots| {
            let used = match queue {
                Queue::Send => s.outstanding_send[peer],
                Queue::Recv => s.outstanding_recv[peer],
            };
            used < depth && s.has_free()
        };
        if room(&self.slots.borrow()) {
            return Ok(());
        }
        let start = Instant::now();
        loop {
            let left = self.cfg.op_timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(TransportError::QueueFull {
                    queue: if queue == Queue::Send {
                        "send"
                    } else {
                        "receive"
                    },
                    peer,
                    depth,
                    after: start.elapsed(),
                });
            }
            self.wait_progress(left)?;
            if room(&self.slots.borrow()) {
                return Ok(());
            }
        }
    }

    /// Takes a slot after `reserve` made sure one is free.
    fn alloc(&self, peer: usize, queue: Queue, bufs: &[RawBuf]) -> TransportResult<(u32, u32)> {
        self.slots
            .borrow_mut()
            .alloc(peer, queue, bufs)
            .ok_or_else(|| TransportError::QueueFull {
                queue: if queue == Queue::Send {
                    "send"
                } else {
                    "receive"
                },
                peer,
                depth: match queue {
                    Queue::Send => self.transport.send_depth(peer),
                    Queue::Recv => self.transport.recv_depth(peer),
                },
                after: Duration::ZERO,
            })
    }

    /// Posts one send-queue request.
    pub(crate) fn post_send(
        &self,
        peer: usize,
        spec: SendSpec<'_, '_>,
        bufs: &[RawBuf],
        scatter: &[Sge],
    ) -> TransportResult<Ticket> {
        self.check_peer(peer)?;
        self.reserve(peer, Queue::Send)?;
        let (index, epoch) = self.alloc(peer, Queue::Send, bufs)?;
        let op = self.build_op(peer, wr_id(index, epoch), &spec, scatter, true);
        // SAFETY: the buffers are borrowed for 'env by the request, and
        // the scope that posted it drains it before 'env ends.
        if let Err(e) = unsafe { self.transport.post_send(peer, &[op]) } {
            self.slots.borrow_mut().unpost(index);
            return Err(e);
        }
        Ok(Ticket { index, epoch })
    }

    /// Posts several sends or writes to one peer with one doorbell per
    /// chunk; only the last is signalled (plus one every half queue, so
    /// the send queue never fills with unsignalled work).
    pub(crate) fn post_send_list(
        &self,
        peer: usize,
        specs: &[SendSpec<'_, '_>],
        out: &mut Vec<Ticket>,
    ) -> TransportResult<()> {
        self.check_peer(peer)?;
        let signal_every = (self.transport.send_depth(peer) / 2).max(1) as usize;
        let mut ops = [SendOp {
            wr_id: 0,
            kind: OpKind::Send,
            sges: [Sge::default(); MAX_ELEMENTS],
            num_sge: 0,
            remote_addr: 0,
            rkey: 0,
            imm: None,
            signaled: true,
            inline: false,
        }; 16];
        for (chunk_no, chunk) in specs.chunks(ops.len()).enumerate() {
            let first = out.len();
            for (i, spec) in chunk.iter().enumerate() {
                self.reserve(peer, Queue::Send)?;
                let (index, epoch) = self.alloc(peer, Queue::Send, &[])?;
                let n = chunk_no * ops.len() + i;
                let signaled = n + 1 == specs.len() || (n + 1) % signal_every == 0;
                ops[i] = self.build_op(peer, wr_id(index, epoch), spec, &[], signaled);
                out.push(Ticket { index, epoch });
            }
            // SAFETY: as in post_send.
            if let Err(e) = unsafe { self.transport.post_send(peer, &ops[..chunk.len()]) } {
                let mut slots = self.slots.borrow_mut();
                for t in out.drain(first..) {
                    slots.unpost(t.index);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn build_op(
        &self,
        peer: usize,
        wr_id: u64,
        spec: &SendSpec<'_, '_>,
        scatter: &[Sge],
        signaled: bool,
    ) -> SendOp {
        let mut sges = [Sge::default(); MAX_ELEMENTS];
        let num_sge = if spec.kind == OpKind::Read {
            sges[..scatter.len()].copy_from_slice(scatter);
            scatter.len()
        } else {
            for (s, g) in sges.iter_mut().zip(spec.gather) {
                *s = g.sge;
            }
            spec.gather.len()
        };
        let total: u64 = sges[..num_sge].iter().map(|s| u64::from(s.length())).sum();
        let (remote_addr, rkey) = spec.remote.unwrap_or((0, 0));
        SendOp {
            wr_id,
            kind: spec.kind,
            sges,
            num_sge,
            remote_addr,
            rkey,
            imm: spec.imm,
            signaled,
            // Small payloads ride in the WQE: no DMA read of the buffer.
            inline: spec.kind != OpKind::Read
                && total > 0
                && total <= u64::from(self.max_inline[peer]),
        }
    }

    /// Posts a receive.
    pub(crate) fn post_recv(&self, peer: usize, scatter: &Scatters<'_>) -> TransportResult<Ticket> {
        self.check_peer(peer)?;
        self.reserve(peer, Queue::Recv)?;
        let (sges, bufs) = scatter_parts(scatter);
        let n = scatter.len;
        let (index, epoch) = self.alloc(peer, Queue::Recv, &bufs[..n])?;
        let op = RecvOp {
            wr_id: wr_id(index, epoch),
            sges,
            num_sge: n,
        };
        // SAFETY: as in post_send.
        if let Err(e) = unsafe { self.transport.post_recv(peer, &[op]) } {
            self.slots.borrow_mut().unpost(index);
            return Err(e);
        }
        Ok(Ticket { index, epoch })
    }

    /// Polls once and routes what arrived. Returns how many arrived.
    pub(crate) fn progress(&self) -> TransportResult<usize> {
        let mut out = self.batch.borrow_mut();
        let n = self.transport.poll(&mut out[..])?;
        self.route_all(&out[..n]);
        Ok(n)
    }

    /// Sleeps until something arrives or `timeout` passes; routes it.
    fn wait_progress(&self, timeout: Duration) -> TransportResult<usize> {
        let mut out = self.batch.borrow_mut();
        let n = self.transport.wait(&mut out[..], timeout)?;
        self.route_all(&out[..n]);
        Ok(n)
    }

    fn route_all(&self, cs: &[Completion]) {
        if cs.is_empty() {
            return;
        }
        let mut slots = self.slots.borrow_mut();
        let mut broken = self.broken.borrow_mut();
        for c in cs {
            // A failed request moves its QP to the error state: remember,
            // so the next post reports it instead of failing obscurely.
            if c.status != WcStatus::SUCCESS {
                let peer = slots.slots.get(c.wr_id as u32 as usize).map(|s| s.peer);
                if let Some(p) = peer {
                    broken[p] = true;
                }
            }
            slots.route(*c);
        }
    }

    /// The completion of `t` if it has arrived (consumes it), after one
    /// poll of the transport.
    pub(crate) fn try_take(
        &self,
        t: Ticket,
        poll_first: bool,
    ) -> TransportResult<Option<(Completion, [RawBuf; MAX_ELEMENTS], usize)>> {
        if poll_first {
            self.progress()?;
        }
        let mut slots = self.slots.borrow_mut();
        match slots.state(t.index, t.epoch) {
            Some(State::Done(c)) => {
                let slot = &slots.slots[t.index as usize];
                let (bufs, n) = (slot.bufs, slot.nbufs);
                slots.release(t.index);
                Ok(Some((c, bufs, n)))
            }
            Some(State::Pending) => Ok(None),
            // Already consumed: cannot happen through a handle, which is
            // consumed by taking its completion.
            Some(State::Free) | None => Err(TransportError::Config(
                "work handle refers to a released request".into(),
            )),
        }
    }

    /// Waits for `t` up to `timeout`, sleeping (`spin == false`) or busy
    /// polling.
    pub(crate) fn wait_for(
        &self,
        t: Ticket,
        timeout: Duration,
        spin: bool,
    ) -> TransportResult<(Completion, [RawBuf; MAX_ELEMENTS], usize)> {
        let start = Instant::now();
        loop {
            if let Some(done) = self.try_take(t, spin)? {
                return Ok(done);
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(TransportError::Timeout {
                    wr_id: t.wr_id(),
                    after: start.elapsed(),
                });
            }
            if !spin {
                self.wait_progress(left)?;
            } else {
                std::hint::spin_loop();
            }
        }
    }

    pub(crate) fn detach(&self, t: Ticket) {
        self.slots.borrow_mut().detach(t.index, t.epoch);
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
        while self.slots.borrow().pending() > 0 {
            let left = deadline.saturating_sub(start.elapsed());
            if left.is_zero() {
                break;
            }
            if self.wait_progress(left).is_err() {
                break; // a CQ that cannot be waited on: flush below
            }
        }
        if self.slots.borrow().pending() > 0 {
            self.flush_outstanding(&mut err);
        }
        let mut slots = self.slots.borrow_mut();
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
        for i in 0..slots.slots.len() {
            if let State::Done(c) = slots.slots[i].state {
                if c.status != WcStatus::SUCCESS && !err.flushed.contains(&c.wr_id) {
                    err.failed.push(error_of(&c));
                }
                if unpolled_is_error {
                    err.unpolled += 1;
                }
                slots.release(i as u32);
            }
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
        let pending: Vec<(usize, u64)> = self.slots.borrow().pending_ids().collect();
        let mut peers: Vec<usize> = pending.iter().map(|&(p, _)| p).collect();
        peers.sort_unstable();
        peers.dedup();
        err.flushed = pending.iter().map(|&(_, id)| id).collect();
        log::warn!(
            "scope drain deadline passed: flushing {} outstanding request(s) to peer(s) {peers:?}",
            err.flushed.len()
        );
        for &p in &peers {
            self.broken.borrow_mut()[p] = true;
            if let Err(e) = self.transport.flush(p) {
                eprintln!(
                    "ferrovia: cannot flush peer {p} ({e}); aborting rather than freeing buffers under DMA"
                );
                std::process::abort();
            }
        }
        let start = Instant::now();
        while self.slots.borrow().pending() > 0 {
            let left = FLUSH_GRACE.saturating_sub(start.elapsed());
            if left.is_zero() || self.wait_progress(left).is_err() {
                eprintln!(
                    "ferrovia: {} flushed request(s) never completed; aborting rather than freeing buffers under DMA",
                    self.slots.borrow().pending()
                );
                std::process::abort();
            }
        }
    }
}

fn scatter_parts(s: &Scatters<'_>) -> ([Sge; MAX_ELEMENTS], [RawBuf; MAX_ELEMENTS]) {
    let mut sges = [Sge::default(); MAX_ELEMENTS];
    let mut bufs = [RawBuf::default(); MAX_ELEMENTS];
    for (i, e) in s.items.iter().flatten().enumerate() {
        sges[i] = e.sge;
        bufs[i] = RawBuf {
            ptr: e.ptr,
            sge: e.sge,
        };
    }
    (sges, bufs)
}

/// The SGEs and hand-back buffers of a read's scatter list.
pub(crate) fn read_parts(s: &Scatters<'_>) -> ([Sge; MAX_ELEMENTS], [RawBuf; MAX_ELEMENTS]) {
    scatter_parts(s)
}
