//! Owned requests posted as lists: one doorbell per chunk of up to 16 and
//! selective signalling, as the scoped list posts do, while each request
//! keeps its own completion (a signalled completion completes the
//! unsignalled requests before it, waking each one's waker).

use std::task::Waker;

use ferrovia_types::Sge;

use crate::core::ChannelCore;
use crate::element::Gather;
use crate::error::TransportError;
use crate::op::{CHUNK, EMPTY_OP, SendOp};
use crate::owned::{OwnedKind, OwnedOp, OwnedTicket, Refused};
use crate::slots::{Queue, wr_id};

/// A chunk being built: its ops, and where their results sit in the
/// output (fixed arrays: building a list allocates nothing but the
/// output).
struct Chunk {
    peer: usize,
    len: usize,
    ops: [SendOp; CHUNK],
    at: [usize; CHUNK],
}

impl ChannelCore {
    /// Posts `ops` without blocking, each like
    /// [`ChannelCore::try_post_owned`] would, but consecutive send-queue
    /// requests to one peer go as lists: one doorbell per chunk of up to
    /// 16, only the last of each chunk (and one every half queue)
    /// signalled. Returns one result per op, in order. A receive in the
    /// list is posted on its own.
    pub fn try_post_owned_list(
        &self,
        ops: impl IntoIterator<Item = OwnedOp>,
        waker: Option<&Waker>,
    ) -> Vec<Result<OwnedTicket, Refused>> {
        let ops = ops.into_iter();
        let mut out: Vec<Result<OwnedTicket, Refused>> = Vec::with_capacity(ops.size_hint().0);
        let mut chunk: Option<Chunk> = None;
        for op in ops {
            if matches!(op.kind, OwnedKind::Receive | OwnedKind::ReceiveAny) {
                self.flush_chunk(chunk.take(), &mut out);
                out.push(self.try_post_owned(op, waker));
                continue;
            }
            let sge = match self.check_owned(&op) {
                Ok(sge) => sge,
                Err(e) => {
                    out.push(Err(Refused::Failed(e, op.buf)));
                    continue;
                }
            };
            let peer = op.peer;
            if chunk
                .as_ref()
                .is_some_and(|c| c.peer != peer || c.len == CHUNK)
            {
                self.flush_chunk(chunk.take(), &mut out);
            }
            let Some(&depth) = self.send_depth.get(peer) else {
                let e = TransportError::NoSuchPeer {
                    peer,
                    count: self.peers(),
                };
                out.push(Err(Refused::Failed(e, op.buf)));
                continue;
            };
            let mut st = self.state();
            if let Err(e) = self.check_peer(&st, peer) {
                out.push(Err(Refused::Failed(e, op.buf)));
                continue;
            }
            if !st.room(peer, Queue::Send, 1, depth) {
                drop(st);
                // Post what is built: its completions free the room.
                self.flush_chunk(chunk.take(), &mut out);
                st = self.state();
                if !st.room(peer, Queue::Send, 1, depth) {
                    if let Some(w) = waker {
                        st.slots.owned.room_waiters.push(w.clone());
                    }
                    out.push(Err(Refused::Full(op)));
                    continue;
                }
            }
            let cap = st.slots.meta.len();
            st.slots.owned.ensure(cap);
            let (index, epoch) = st.slots.alloc(peer, Queue::Send, &[], false);
            st.slots.meta[index as usize].owned = true;
            let gather = [Gather::owned(sge)];
            let spec = op.spec(&gather);
            let scatter: &[Sge] = if spec.kind.writes_locally() {
                std::slice::from_ref(&sge)
            } else {
                &[]
            };
            // Signalled or not is decided when the chunk is posted.
            let sop = self.build_op(peer, wr_id(index, epoch), &spec, scatter, false);
            st.slots
                .owned
                .hold(index, op.buf, waker, op.kind.outbound());
            drop(st);
            let c = match &mut chunk {
                Some(c) => c,
                empty => empty.insert(Chunk {
                    peer,
                    len: 0,
                    ops: [EMPTY_OP; CHUNK],
                    at: [0; CHUNK],
                }),
            };
            c.ops[c.len] = sop;
            c.at[c.len] = out.len();
            c.len += 1;
            out.push(Ok(OwnedTicket { index, epoch }));
        }
        self.flush_chunk(chunk, &mut out);
        out
    }

    /// Posts a built chunk with one doorbell; on failure every request of
    /// it is refused with its buffer back.
    fn flush_chunk(&self, chunk: Option<Chunk>, out: &mut [Result<OwnedTicket, Refused>]) {
        let Some(mut c) = chunk else {
            return;
        };
        let signal_every = (self.send_depth[c.peer] / 2).max(1) as usize;
        let n = c.len;
        let mut st = self.state();
        let before = st.slots.outstanding_send[c.peer] as usize - n;
        for (i, op) in c.ops[..n].iter_mut().enumerate() {
            op.signaled = i + 1 == n || (before + i + 1).is_multiple_of(signal_every);
        }
        // SAFETY: every op's buffer was moved into its slot's owned table
        // (`hold`) before this post, and stays there until the transport
        // reports the op (or a later signalled op of this peer, which
        // completes it), as for a single owned post (`try_post_owned`);
        // the same buffer kinds are accepted, by the same checks.
        let posted = unsafe {
            self.transport
                .post_send_and_poll(c.peer, &c.ops[..n], &mut st.batch)
        };
        let e = match posted {
            Ok(taken) => {
                // Counted as sent, then what finished in the call is routed
                // at once; wakers it made due, once the state is let go.
                st.counters.sent_all(c.peer, &c.ops[..n]);
                if st.route_posted(taken) {
                    drop(st);
                    self.wake_routed();
                }
                return;
            }
            Err(e) => e,
        };
        let mut first = Some(e);
        for (op, &at) in c.ops[..n].iter().zip(&c.at[..n]) {
            let index = op.wr_id as u32;
            let buf = st.slots.owned.take(index);
            st.slots.meta[index as usize].owned = false;
            st.slots.unpost(index);
            let e = first.take().unwrap_or_else(|| {
                TransportError::Config("an earlier request of its list was refused".into())
            });
            if let Some(buf) = buf {
                out[at] = Err(Refused::Failed(e, buf));
            }
        }
    }
}
