//! Posting: reserve queue room and slots, build the transport's ops, hand
//! them over. Nothing here allocates.

use std::cell::RefMut;
use std::time::Instant;

use ferrovia_types::Sge;

use crate::core::{ChannelCore, EngineState, Ticket};
use crate::element::Gather;
use crate::error::{TransportError, TransportResult};
use crate::op::{CHUNK, EMPTY_OP, OpKind, RecvOp, SendOp};
use crate::request::{MAX_ELEMENTS, Scatters, SendWorkRequest, WriteWorkRequest};
use crate::slots::{Queue, RawBuf, wr_id};

/// What a send-queue request does, before it has a wr_id.
pub(crate) struct SendSpec<'a, 'env> {
    pub(crate) kind: OpKind,
    pub(crate) gather: &'a [Gather<'env>],
    pub(crate) remote: Option<(u64, u32)>,
    pub(crate) imm: Option<u32>,
    /// Atomics: (compare or add, swap).
    pub(crate) operands: (u64, u64),
}

/// What posting one request gave its handle.
pub(crate) enum Posted {
    /// Outstanding, in the slot of this ticket.
    Pending(Ticket),
    /// Finished inside the post, successfully (the ticket names the slot
    /// it had, now free): its peer.
    Done(Ticket, u32),
}

/// A request that posts to the send queue: sends and writes, in lists.
pub(crate) trait AsSpec<'env> {
    fn spec(&self) -> SendSpec<'_, 'env>;
}

impl<'env> AsSpec<'env> for SendWorkRequest<'_, 'env> {
    fn spec(&self) -> SendSpec<'_, 'env> {
        SendSpec {
            kind: OpKind::Send,
            gather: self.gather,
            remote: None,
            imm: self.imm,
            operands: (0, 0),
        }
    }
}

impl<'env> AsSpec<'env> for WriteWorkRequest<'_, 'env> {
    fn spec(&self) -> SendSpec<'_, 'env> {
        SendSpec {
            kind: OpKind::Write,
            gather: self.gather,
            remote: Some((self.remote.addr(), self.remote.rkey())),
            imm: self.imm,
            operands: (0, 0),
        }
    }
}

impl EngineState {
    /// Whether `peer`'s `queue` has room for `n` more requests and `n`
    /// slots are free.
    #[inline]
    pub(crate) fn room(&self, peer: usize, queue: Queue, n: u32, depth: u32) -> bool {
        let used = match queue {
            Queue::Send => self.slots.outstanding_send[peer],
            Queue::Recv => self.slots.outstanding_recv[peer],
            Queue::Shared => self.slots.outstanding_shared,
        };
        used + n <= depth && self.slots.free_count() >= n as usize
    }
}

impl ChannelCore {
    /// Waits (routing completions) until `peer`'s queue has room for `n`
    /// more requests and `n` slots are free, so allocating them cannot
    /// fail half-way. Checks the peer first. Returns the state, still
    /// borrowed: when there is room at once, posting borrows it only once.
    #[inline]
    pub(crate) fn reserve(
        &self,
        peer: usize,
        queue: Queue,
        n: u32,
    ) -> TransportResult<RefMut<'_, EngineState>> {
        // The common case, checked inline: a peer in range whose
        // connection works, with room now.
        let depth = match queue {
            Queue::Send => self.send_depth.get(peer),
            Queue::Recv => self.recv_depth.get(peer),
            Queue::Shared => None,
        };
        if let Some(&depth) = depth {
            let st = self.state();
            if st.broken.get(peer) == Some(&false) && st.room(peer, queue, n, depth) {
                return Ok(st);
            }
        }
        self.reserve_slow(peer, queue, n)
    }

    /// [`ChannelCore::reserve`] when the common case does not hold: says
    /// what is wrong with the peer, or waits for room.
    #[cold]
    #[inline(never)]
    fn reserve_slow(
        &self,
        peer: usize,
        queue: Queue,
        n: u32,
    ) -> TransportResult<RefMut<'_, EngineState>> {
        let depth = match queue {
            Queue::Send => self.send_depth.get(peer),
            Queue::Recv => self.recv_depth.get(peer),
            Queue::Shared => Some(&self.shared_depth),
        };
        let Some(&depth) = depth else {
            return Err(TransportError::NoSuchPeer {
                peer,
                count: self.peers(),
            });
        };
        let check = |st: &EngineState| match queue {
            // The pool has no peer of its own.
            Queue::Shared if st.shared_broken => Err(TransportError::SharedPoolFlushed),
            Queue::Shared => Ok(()),
            _ => self.check_peer(st, peer),
        };
        {
            let st = self.state();
            check(&st)?;
            if st.room(peer, queue, n, depth) {
                return Ok(st);
            }
        }
        let start = Instant::now();
        loop {
            let left = self.cfg.op_timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(TransportError::QueueFull {
                    queue: match queue {
                        Queue::Send => "send",
                        Queue::Recv => "receive",
                        Queue::Shared => "shared receive",
                    },
                    peer,
                    depth,
                    after: start.elapsed(),
                });
            }
            self.wait_progress(left)?;
            let st = self.state();
            check(&st)?;
            if st.room(peer, queue, n, depth) {
                return Ok(st);
            }
        }
    }

    /// Posts one send-queue request (signalled). Inlined into each kind's
    /// post, so the request's fields go to the op without a `SendSpec` in
    /// memory between them.
    #[inline(always)]
    pub(crate) fn post_send(
        &self,
        peer: usize,
        spec: &SendSpec<'_, '_>,
        bufs: &[RawBuf],
        scatter: &[Sge],
    ) -> TransportResult<Posted> {
        let mut guard = self.reserve(peer, Queue::Send, 1)?;
        let st = &mut *guard;
        // Its hand-back buffers go to the slot only if it stays outstanding.
        let (index, epoch) = st.slots.alloc(peer, Queue::Send, &[], false);
        // Built in place, in the engine's own op array: no copy of an
        // empty op first.
        let op = &mut st.ops[0];
        fill_op(
            op,
            self.max_inline[peer],
            wr_id(index, epoch),
            spec,
            scatter,
            true,
        );
        // SAFETY: every SGE comes from a `Gather<'env>` (a shared borrow
        // of Local memory, which nothing can write while it lasts, or of
        // Shared memory, changed only atomically) or a `Scatter<'env>`
        // moved into the request (an exclusive borrow nobody else holds).
        // Those borrows last until the scope over this core ends; the
        // scope posts only to this core (fixed when it opened), no other
        // scope over it can open meanwhile (`open_scope`), and before it
        // returns it drains the core: every op is reported complete or
        // flushed, so the memory outlives the op as the contract asks.
        let posted = unsafe {
            self.transport
                .post_send_and_poll(peer, std::slice::from_ref(op), &mut st.batch)
        };
        let n = match posted {
            Ok(n) => n,
            Err(e) => {
                st.slots.unpost(index);
                return Err(e);
            }
        };
        let ticket = Ticket { index, epoch };
        st.counters.sent(peer, &st.ops[0]);
        // Done in the call and alone on its peer: settled at once, its slot
        // free again; the handle keeps the completion. (Counted here, as
        // routing would.)
        if n == 1 && bufs.len() <= 1 && st.slots.settle_sole(index, &st.batch[0]) {
            let EngineState {
                counters,
                slots,
                batch,
                ..
            } = st;
            counters.completed(&batch[0], &slots.meta);
            return Ok(Posted::Done(ticket, peer as u32));
        }
        st.slots.set_bufs(index, bufs);
        let wake = st.route_posted(n);
        drop(guard);
        if wake {
            self.wake_routed();
        }
        Ok(Posted::Pending(ticket))
    }

    /// Posts sends or writes to one peer as a list: one doorbell per chunk
    /// of up to 16; only the last request of each chunk is signalled (plus
    /// one every half queue, so the send queue never fills with
    /// unsignalled work). Returns the last request's ticket: it completes
    /// once every request of the list has. The others have no handle and
    /// free their slots as they complete.
    ///
    /// Room for a whole chunk is reserved before any of its slots is
    /// taken, so a chunk is posted entirely or not at all. On an error,
    /// the chunks already posted stay posted (the scope still drains them)
    /// and nothing else is left behind.
    pub(crate) fn post_send_list<'env, W: AsSpec<'env>>(
        &self,
        peer: usize,
        wrs: &[W],
    ) -> TransportResult<Ticket> {
        if wrs.is_empty() {
            return Err(TransportError::EmptyList);
        }
        let depth = self.send_depth.get(peer).copied().unwrap_or(1).max(1);
        let signal_every = (depth / 2).max(1) as usize;
        let chunk_len = CHUNK.min(depth as usize);
        let mut tail = Ticket { index: 0, epoch: 0 };
        let mut posted = 0;
        // Requests left until the next one signalled for the half queue.
        let mut to_signal = signal_every;
        for chunk in wrs.chunks(chunk_len) {
            let mut guard = self.reserve(peer, Queue::Send, chunk.len() as u32)?;
            let st = &mut *guard;
            let max_inline = self.max_inline[peer];
            let last_chunk = posted + chunk.len() == wrs.len();
            // Built in place in the engine's op array, which posting
            // borrows with the state: nothing to clear first.
            for (i, (wr, op)) in chunk.iter().zip(st.ops.iter_mut()).enumerate() {
                let is_tail = last_chunk && i + 1 == chunk.len();
                // Reserved above: a slot is free.
                let (index, epoch) = st.slots.alloc(peer, Queue::Send, &[], !is_tail);
                to_signal -= 1;
                let signaled = i + 1 == chunk.len() || to_signal == 0;
                if to_signal == 0 {
                    to_signal = signal_every;
                }
                fill_op(
                    op,
                    max_inline,
                    wr_id(index, epoch),
                    &wr.spec(),
                    &[],
                    signaled,
                );
                tail = Ticket { index, epoch };
            }
            posted += chunk.len();
            // SAFETY: each op's SGEs come from the `Gather<'env>`s of its
            // request, borrowed until the scope over this core ends, and the
            // scope drains every op of this core before that; see
            // `post_send` for the full argument, which holds per op.
            unsafe { self.post_staged(st, peer, chunk.len()) }?;
        }
        self.wake_routed();
        Ok(tail)
    }

    /// Posts the first `n` ops staged in `st.ops` to `peer`; if the
    /// transport refuses them, their slots are freed (none went).
    ///
    /// # Safety
    /// As [`Transport::post_send`](crate::transport::Transport::post_send): every
    /// op's local and remote memory stays valid, and untouched by the
    /// program where the device writes it, until the transport reports
    /// the op.
    pub(crate) unsafe fn post_staged(
        &self,
        st: &mut EngineState,
        peer: usize,
        n: usize,
    ) -> TransportResult<()> {
        let ops = &st.ops[..n];
        // SAFETY: the caller's contract is the transport's.
        match unsafe { self.transport.post_send_and_poll(peer, ops, &mut st.batch) } {
            Ok(taken) => {
                // Counted as sent before what finished among them is
                // routed (and counted as completed). Wakers it makes due:
                // the caller's `wake_routed` once the state is let go.
                st.counters.sent_all(peer, &st.ops[..n]);
                st.route_posted(taken);
                Ok(())
            }
            Err(e) => {
                for op in &st.ops[..n] {
                    st.slots.unpost(op.wr_id as u32);
                }
                Err(e)
            }
        }
    }

    /// A send-queue op, built by value (the owned posts, which keep their
    /// ops apart from the engine's state).
    pub(crate) fn build_op(
        &self,
        peer: usize,
        wr_id: u64,
        spec: &SendSpec<'_, '_>,
        scatter: &[Sge],
        signaled: bool,
    ) -> SendOp {
        let mut op = EMPTY_OP;
        fill_op(
            &mut op,
            self.max_inline[peer],
            wr_id,
            spec,
            scatter,
            signaled,
        );
        op
    }

    /// Posts a receive from `peer`, or (`peer` `None`) to the shared pool.
    pub(crate) fn post_recv(
        &self,
        peer: Option<usize>,
        scatter: &Scatters<'_>,
    ) -> TransportResult<Ticket> {
        let (peer, queue) = match peer {
            Some(p) if self.shared_depth > 0 => {
                return Err(TransportError::SharedPoolOnly { peer: p });
            }
            Some(p) => (p, Queue::Recv),
            None if self.shared_depth == 0 => return Err(TransportError::NoSharedPool),
            None => (0, Queue::Shared),
        };
        let mut st = self.reserve(peer, queue, 1)?;
        let (sges, bufs) = scatter_parts(scatter);
        let n = scatter.len;
        let (index, epoch) = st.slots.alloc(peer, queue, &bufs[..n], false);
        let op = RecvOp {
            wr_id: wr_id(index, epoch),
            sges,
            num_sge: n,
        };
        // SAFETY: the SGEs come from `Scatter<'env>`s moved into the
        // receive request: exclusive borrows nobody else can use until the
        // slot hands them back after the completion (scope.rs `finish`), or
        // until the scope ends, which drains every op of this core first
        // (see `post_send`).
        let posted = if queue == Queue::Shared {
            // SAFETY: as for a per-peer receive below.
            unsafe { self.transport.post_shared_recv(std::slice::from_ref(&op)) }
        } else {
            // SAFETY: see below.
            unsafe { self.transport.post_recv(peer, std::slice::from_ref(&op)) }
        };
        if let Err(e) = posted {
            st.slots.unpost(index);
            return Err(e);
        }
        st.counters
            .receive_posted((queue != Queue::Shared).then_some(peer));
        Ok(Ticket { index, epoch })
    }
}

/// Writes a send-queue op over `op`, whatever it held: every field the
/// transport reads (the SGEs past `num_sge` are not read, and are left).
#[inline]
fn fill_op(
    op: &mut SendOp,
    max_inline: u32,
    wr_id: u64,
    spec: &SendSpec<'_, '_>,
    scatter: &[Sge],
    signaled: bool,
) {
    let mut total = 0u64;
    if spec.kind.writes_locally() {
        match scatter {
            [one] => op.sges[0] = *one,
            many => op.sges[..many.len()].copy_from_slice(many),
        }
        op.num_sge = scatter.len();
    } else {
        for (s, g) in op.sges.iter_mut().zip(spec.gather) {
            *s = g.sge;
            total += u64::from(g.sge.length());
        }
        op.num_sge = spec.gather.len();
    }
    let (remote_addr, rkey) = spec.remote.unwrap_or((0, 0));
    op.wr_id = wr_id;
    op.kind = spec.kind;
    op.remote_addr = remote_addr;
    op.rkey = rkey;
    op.imm = spec.imm;
    (op.compare_add, op.swap) = spec.operands;
    op.signaled = signaled;
    // Small payloads ride in the WQE: no DMA read of the buffer.
    op.inline = !spec.kind.writes_locally() && total > 0 && total <= u64::from(max_inline);
}

fn scatter_parts(s: &Scatters<'_>) -> ([Sge; MAX_ELEMENTS], [RawBuf; MAX_ELEMENTS]) {
    let mut sges = [Sge::default(); MAX_ELEMENTS];
    let mut bufs = [RawBuf::default(); MAX_ELEMENTS];
    // `collect` fills the items from the front: the first `len` are set.
    for ((item, sge), buf) in s.items[..s.len.min(MAX_ELEMENTS)]
        .iter()
        .zip(&mut sges)
        .zip(&mut bufs)
    {
        if let Some(e) = item {
            *sge = e.sge;
            *buf = RawBuf {
                ptr: e.ptr,
                sge: e.sge,
            };
        }
    }
    (sges, bufs)
}

/// The SGEs and hand-back buffers of a read's scatter list.
pub(crate) fn read_parts(s: &Scatters<'_>) -> ([Sge; MAX_ELEMENTS], [RawBuf; MAX_ELEMENTS]) {
    scatter_parts(s)
}
