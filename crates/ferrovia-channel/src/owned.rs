//! Owned requests: the engine, not a borrow, keeps a request's buffer
//! alive. What an async layer (or any caller that cannot hold a scope
//! open) posts through.
//!
//! A request takes its registered buffer by value ([`OwnedBuf`]) and the
//! engine holds it in the request's slot until the transport reports the
//! request complete or flushed; only then does the buffer come back
//! ([`ChannelCore::poll_owned`]). Whoever gives up on a request
//! ([`ChannelCore::abandon_owned`], e.g. a dropped future) never frees
//! memory the device may still touch: the buffer stays in the slot until
//! the completion arrives and then goes to the returned list
//! ([`ChannelCore::take_returned`]). Forgetting the ticket leaks the slot
//! and buffer until the engine is dropped. Dropping the engine with
//! requests outstanding flushes the peers of receives and reads at once,
//! waits for sends, writes and atomics up to the drain deadline, flushes
//! what is left, and leaks (never frees) the buffers of any whose flush
//! never completes (`owned_shutdown`: the same steps an async layer takes
//! without blocking). Receives from the shared pool
//! ([`OwnedOp::receive_any`]) name their sender in their completion.
//!
//! Nothing here blocks: a full queue is reported ([`Refused::Full`]) with
//! the request handed back, and the waker given is woken once a completion
//! frees room.

use std::ops::Range;
use std::task::Waker;
use std::time::{Duration, Instant};

use ferrovia_mr::{RegisteredBuffer, RemoteMemoryRegion};
use ferrovia_types::{AccessFlags, Sge};

use crate::atomic::AtomicOp;
use crate::core::ChannelCore;
use crate::element::Gather;
use crate::error::{TransportError, TransportResult};
use crate::op::{Completion, OpKind, RecvOp};
use crate::owned_buf::{OwnedBuf, Returned};
use crate::post::SendSpec;
use crate::request::{MAX_ELEMENTS, check_right, fits_remote};
use crate::slots::{Queue, wr_id};

/// What an owned request does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OwnedKind {
    Send {
        imm: Option<u32>,
    },
    Write {
        remote: RemoteMemoryRegion,
        imm: Option<u32>,
    },
    Receive,
    /// A receive from the shared pool: any peer's message.
    ReceiveAny,
    Read {
        remote: RemoteMemoryRegion,
    },
    Atomic {
        remote: RemoteMemoryRegion,
        op: AtomicOp,
    },
}

impl OwnedKind {
    /// Whether the request's effect leaves for the peer (a message, a
    /// write, an atomic on its memory): what an owner going away waits
    /// for, where a receive or read (whose bytes only this side would
    /// see) can be flushed at once.
    pub(crate) fn outbound(&self) -> bool {
        match self {
            OwnedKind::Send { .. } | OwnedKind::Write { .. } | OwnedKind::Atomic { .. } => true,
            OwnedKind::Receive | OwnedKind::ReceiveAny | OwnedKind::Read { .. } => false,
        }
    }
}

/// The peer field of a receive from the shared pool, which has none.
const POOL: usize = usize::MAX;

/// One request to one peer (or, a receive, to the shared pool), holding
/// its buffer; posted with [`ChannelCore::try_post_owned`].
#[derive(Debug)]
pub struct OwnedOp {
    pub(crate) peer: usize,
    pub(crate) kind: OwnedKind,
    pub(crate) buf: OwnedBuf,
    pub(crate) range: Range<usize>,
}

impl OwnedOp {
    fn new(peer: usize, kind: OwnedKind, buf: OwnedBuf, range: Range<usize>) -> OwnedOp {
        OwnedOp {
            peer,
            kind,
            buf,
            range,
        }
    }

    /// Sends `range` of `src` to `peer` as one message.
    pub fn send(peer: usize, src: OwnedBuf, range: Range<usize>) -> OwnedOp {
        Self::new(peer, OwnedKind::Send { imm: None }, src, range)
    }

    /// Writes `range` of `src` to the start of `remote` at `peer`.
    pub fn write(
        peer: usize,
        src: OwnedBuf,
        range: Range<usize>,
        remote: RemoteMemoryRegion,
    ) -> OwnedOp {
        Self::new(peer, OwnedKind::Write { remote, imm: None }, src, range)
    }

    /// Receives `peer`'s next message into `range` of `dst`.
    pub fn receive(peer: usize, dst: RegisteredBuffer, range: Range<usize>) -> OwnedOp {
        Self::new(peer, OwnedKind::Receive, OwnedBuf::Plain(dst), range)
    }

    /// Receives any peer's next message from the shared pool into `range`
    /// of `dst` (an engine built with `shared_receives(n)`); the
    /// completion's `peer` names the sender. Refused with
    /// [`TransportError::NoSharedPool`] on an engine without a pool.
    pub fn receive_any(dst: RegisteredBuffer, range: Range<usize>) -> OwnedOp {
        Self::new(POOL, OwnedKind::ReceiveAny, OwnedBuf::Plain(dst), range)
    }

    /// Reads the start of `remote` at `peer` into `range` of `dst`.
    pub fn read(
        peer: usize,
        dst: RegisteredBuffer,
        range: Range<usize>,
        remote: RemoteMemoryRegion,
    ) -> OwnedOp {
        Self::new(
            peer,
            OwnedKind::Read { remote },
            OwnedBuf::Plain(dst),
            range,
        )
    }

    /// Runs `op` on the 8-byte word at the start of `remote` at `peer`;
    /// its original value lands in `range` (8 bytes) of `result`.
    pub fn atomic(
        peer: usize,
        result: RegisteredBuffer,
        range: Range<usize>,
        remote: RemoteMemoryRegion,
        op: AtomicOp,
    ) -> OwnedOp {
        Self::new(
            peer,
            OwnedKind::Atomic { remote, op },
            OwnedBuf::Plain(result),
            range,
        )
    }

    /// Also delivers `imm` to the receiver (sends and writes; ignored by
    /// the other kinds).
    pub fn with_imm(mut self, imm: u32) -> OwnedOp {
        match &mut self.kind {
            OwnedKind::Send { imm: i } | OwnedKind::Write { imm: i, .. } => *i = Some(imm),
            _ => {}
        }
        self
    }

    /// The peer; `None` for a receive from the shared pool (its sender
    /// is known once a message landed).
    pub fn peer(&self) -> Option<usize> {
        (!matches!(self.kind, OwnedKind::ReceiveAny)).then_some(self.peer)
    }

    /// The buffer back, unposted.
    pub fn into_buf(self) -> OwnedBuf {
        self.buf
    }

    /// The transport's view of a send-queue request, reading `gather`
    /// (sends and writes).
    pub(crate) fn spec<'a>(&self, gather: &'a [Gather<'static>]) -> SendSpec<'a, 'static> {
        let at = |r: &RemoteMemoryRegion| Some((r.addr(), r.rkey()));
        let (kind, remote, imm, operands) = match &self.kind {
            OwnedKind::Send { imm } => (OpKind::Send, None, *imm, (0, 0)),
            OwnedKind::Write { remote, imm } => (OpKind::Write, at(remote), *imm, (0, 0)),
            // Not send-queue requests: never asked.
            OwnedKind::Receive | OwnedKind::ReceiveAny => (OpKind::Send, None, None, (0, 0)),
            OwnedKind::Read { remote } => (OpKind::Read, at(remote), None, (0, 0)),
            OwnedKind::Atomic { remote, op } => match *op {
                AtomicOp::FetchAdd { add } => (OpKind::FetchAdd, at(remote), None, (add, 0)),
                AtomicOp::CompareSwap { compare, swap } => {
                    (OpKind::CompareSwap, at(remote), None, (compare, swap))
                }
            },
        };
        SendSpec {
            kind,
            gather: if kind.writes_locally() { &[] } else { gather },
            remote,
            imm,
            operands,
        }
    }
}

/// Why [`ChannelCore::try_post_owned`] did not post.
#[derive(Debug)]
pub enum Refused {
    /// The peer's queue (or the slot table) is full: try again once the
    /// waker given was woken. The request, untouched.
    Full(OwnedOp),
    /// The request cannot be posted; its buffer, back.
    Failed(TransportError, OwnedBuf),
}

/// A posted owned request, to poll or give up on. Not `Clone`: one owner
/// takes the completion (or gives up) once.
#[derive(Debug)]
#[must_use = "an owned request is polled with poll_owned or given up with abandon_owned"]
pub struct OwnedTicket {
    pub(crate) index: u32,
    pub(crate) epoch: u32,
}

impl OwnedTicket {
    /// The wr_id the request was posted with.
    pub fn wr_id(&self) -> u64 {
        wr_id(self.index, self.epoch)
    }
}

/// What [`ChannelCore::poll_owned`] found.
#[derive(Debug)]
pub enum OwnedPoll {
    /// Completed (successfully or not): the completion and the buffer.
    Ready(Completion, OwnedBuf),
    /// Outstanding; the waker is woken when it completes.
    Pending(OwnedTicket),
    /// Collected already: a scope's drain over this engine settled it, and
    /// its buffer is in the returned list.
    Gone,
}

impl ChannelCore {
    /// Posts `op` without blocking. The engine holds its buffer until the
    /// transport reports it (see the module docs). On [`Refused::Full`],
    /// `waker` (if any) is woken once a completion frees room.
    pub fn try_post_owned(
        &self,
        op: OwnedOp,
        waker: Option<&Waker>,
    ) -> Result<OwnedTicket, Refused> {
        let sge = match self.check_owned(&op) {
            Ok(sge) => sge,
            Err(e) => return Err(Refused::Failed(e, op.buf)),
        };
        let (queue, depth) = match op.kind {
            OwnedKind::Receive => (Queue::Recv, self.recv_depth.get(op.peer)),
            OwnedKind::ReceiveAny => (Queue::Shared, Some(&self.shared_depth)),
            _ => (Queue::Send, self.send_depth.get(op.peer)),
        };
        // The pool has no peer of its own (`room` and `alloc` ignore it).
        let peer = if queue == Queue::Shared { 0 } else { op.peer };
        let Some(&depth) = depth else {
            let e = TransportError::NoSuchPeer {
                peer,
                count: self.peers(),
            };
            return Err(Refused::Failed(e, op.buf));
        };
        let mut st = self.state();
        let usable = match queue {
            Queue::Shared if st.shared_broken => Err(TransportError::SharedPoolFlushed),
            Queue::Shared => Ok(()),
            _ => self.check_peer(&st, peer),
        };
        if let Err(e) = usable {
            return Err(Refused::Failed(e, op.buf));
        }
        if !st.room(peer, queue, 1, depth) {
            if let Some(w) = waker {
                st.slots.owned.room_waiters.push(w.clone());
            }
            return Err(Refused::Full(op));
        }
        let cap = st.slots.meta.len();
        st.slots.owned.ensure(cap);
        let (index, epoch) = st.slots.alloc(peer, queue, &[], false);
        st.slots.meta[index as usize].owned = true;
        let id = wr_id(index, epoch);
        let gather = [Gather::owned(sge)];
        let spec = op.spec(&gather);
        st.slots
            .owned
            .hold(index, op.buf, waker, op.kind.outbound());
        let posted = if queue != Queue::Send {
            let mut sges = [Sge::default(); MAX_ELEMENTS];
            sges[0] = sge;
            let rop = RecvOp {
                wr_id: id,
                sges,
                num_sge: 1,
            };
            // SAFETY: the buffer behind `sge` was moved into this slot's
            // owned table (`hold`) above. It leaves that table only when the
            // transport has reported this request (taken by its owner after
            // `Done`, or handed to the returned list when the slot is
            // released after its completion), when the post fails (below),
            // or never (leaked when the engine is dropped with the request
            // unreported). Its memory does not move with the value and is
            // freed only when the value drops. It is owned `Local` memory
            // (`check_owned`), so nothing else in this process can reach
            // it, and no peer may write it. A receive from the pool is the
            // same, but any peer's message may land in it.
            let r = unsafe {
                if queue == Queue::Shared {
                    self.transport.post_shared_recv(std::slice::from_ref(&rop))
                } else {
                    self.transport.post_recv(peer, std::slice::from_ref(&rop))
                }
            };
            if r.is_ok() {
                st.counters
                    .receive_posted((queue != Queue::Shared).then_some(peer));
            }
            r.map(|()| false)
        } else {
            let scatter = if spec.kind.writes_locally() {
                std::slice::from_ref(&sge)
            } else {
                &[]
            };
            let sop = self.build_op(peer, id, &spec, scatter, true);
            // SAFETY: as for a receive above: the engine holds the buffer
            // until the transport reports this request. A read's or
            // atomic's target is owned `Local` memory nobody else reaches;
            // a source is either owned (nobody else reaches it) or shared
            // through an `Arc`, which hands out only shared references, so
            // it is changed meanwhile only by atomic stores to `Shared`
            // memory, as the contract allows.
            // What finished in the call (this op among it) is routed at
            // once, counted as sent first: its future's first look finds it.
            let posted = unsafe {
                self.transport
                    .post_send_and_poll(peer, std::slice::from_ref(&sop), &mut st.batch)
            };
            posted.map(|n| {
                st.counters.sent(peer, &sop);
                st.route_posted(n)
            })
        };
        match posted {
            Ok(wake) => {
                if wake {
                    // Wakers routing made due, once the state is let go.
                    drop(st);
                    self.wake_routed();
                }
                Ok(OwnedTicket { index, epoch })
            }
            Err(e) => {
                let buf = st.slots.owned.take(index);
                st.slots.meta[index as usize].owned = false;
                st.slots.unpost(index);
                match buf {
                    Some(buf) => Err(Refused::Failed(e, buf)),
                    // Cannot happen: held just above.
                    None => unreachable!("an owned request's buffer vanished before posting"),
                }
            }
        }
    }

    /// Checks what can be checked before posting; the element to post.
    pub(crate) fn check_owned(&self, op: &OwnedOp) -> TransportResult<Sge> {
        let sge = op.buf.sge(op.range.clone())?;
        let len = u64::from(sge.length());
        match &op.kind {
            OwnedKind::Send { .. } => {}
            OwnedKind::Write { remote, .. } => {
                check_right(remote, AccessFlags::REMOTE_WRITE, "an RDMA write")?;
                fits_remote(len, remote)?;
            }
            OwnedKind::Receive => {
                op.buf.writable()?;
                if self.shared_depth > 0 {
                    return Err(TransportError::SharedPoolOnly { peer: op.peer });
                }
            }
            OwnedKind::ReceiveAny => {
                op.buf.writable()?;
                if self.shared_depth == 0 {
                    return Err(TransportError::NoSharedPool);
                }
            }
            OwnedKind::Read { remote } => {
                op.buf.writable()?;
                check_right(remote, AccessFlags::REMOTE_READ, "an RDMA read")?;
                fits_remote(len, remote)?;
            }
            OwnedKind::Atomic { remote, .. } => {
                op.buf.writable()?;
                if len != 8 {
                    return Err(TransportError::AtomicResultSize { len: len as usize });
                }
                if !remote.addr().is_multiple_of(8) {
                    return Err(TransportError::MisalignedAtomic {
                        addr: remote.addr(),
                    });
                }
                check_right(remote, AccessFlags::REMOTE_ATOMIC, "a remote atomic")?;
                fits_remote(8, remote)?;
                if !self.atomics {
                    return Err(TransportError::AtomicsUnsupported { peer: op.peer });
                }
            }
        }
        Ok(sge)
    }

    /// The completion and buffer of `t` if it has completed (after routing
    /// what the transport reported last; this does not poll it), else
    /// the ticket back, with `waker` to be woken when it completes.
    pub fn poll_owned(&self, t: OwnedTicket, waker: &Waker) -> OwnedPoll {
        let mut st = self.state();
        if let Some((c, buf)) = st.slots.take_owned(t.index, t.epoch) {
            return match buf {
                Some(buf) => OwnedPoll::Ready(c, buf),
                None => OwnedPoll::Gone,
            };
        }
        match st.slots.state(t.index, t.epoch) {
            Some(_) => {
                st.slots.owned.set_waker(t.index, waker);
                OwnedPoll::Pending(t)
            }
            None => OwnedPoll::Gone,
        }
    }

    /// Gives up on `t`: the engine keeps its buffer until it completes,
    /// then moves it to the returned list. Past `deadline` without a
    /// completion, [`ChannelCore::flush_abandoned`] flushes its peer.
    pub fn abandon_owned(&self, t: OwnedTicket) {
        let mut st = self.state();
        if st.slots.abandon_owned(t.index, t.epoch) {
            st.slots
                .owned
                .abandoned
                .push_back((Instant::now(), t.index, t.epoch));
        }
    }

    /// Moves the buffers of owned requests nobody took into `out`.
    pub fn take_returned(&self, out: &mut Vec<Returned>) {
        out.append(&mut self.state().slots.owned.returned);
    }

    /// Flushes the peers of requests given up on more than `older_than`
    /// ago that are still outstanding (the drain rule of a scope, applied
    /// per request): their connections go to the error state, so the
    /// buffers come back. Returns how long until the next one is due.
    pub fn flush_abandoned(&self, older_than: Duration) -> Option<Duration> {
        let now = Instant::now();
        loop {
            let mut st = self.state();
            let &(at, index, epoch) = st.slots.owned.abandoned.front()?;
            if st.slots.state(index, epoch).is_none() {
                st.slots.owned.abandoned.pop_front();
                continue;
            }
            let due = at + older_than;
            if due > now {
                return Some(due - now);
            }
            st.slots.owned.abandoned.pop_front();
            let peer = st.slots.peer_at(index);
            if st.broken.get(peer).copied().unwrap_or(true) {
                continue;
            }
            st.broken[peer] = true;
            st.counters.flushed(peer);
            drop(st);
            tracing::warn!(
                "a request given up on {older_than:?} ago is still outstanding: flushing the connection to peer {peer}"
            );
            if let Err(e) = self.transport.flush(peer) {
                tracing::error!("flushing peer {peer}: {e}");
            }
        }
    }

    /// Requests posted and not yet reported by the transport.
    pub fn outstanding(&self) -> usize {
        self.state().slots.pending()
    }

    /// The engine's configuration.
    pub fn config(&self) -> &crate::ChannelConfig {
        &self.cfg
    }

    /// The transport's event fd ([`Transport::event_fd`](crate::transport::Transport::event_fd)).
    pub fn event_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.transport.event_fd()
    }

    /// Arms the transport's event fd ([`Transport::arm`](crate::transport::Transport::arm)).
    pub fn arm(&self) -> TransportResult<()> {
        self.transport.arm()
    }

    /// Consumes the event fd's readiness ([`Transport::ack_events`](crate::transport::Transport::ack_events)).
    pub fn ack_events(&self) -> TransportResult<()> {
        self.transport.ack_events()
    }
}
