//! How two-sided messages are tagged: the sender's index, the generation
//! of the connection it was sent on and the immediate travel in the 64-bit
//! UCX tag, so a receive posted for a peer matches only that peer's
//! messages of the connection's current generation, in order.
//!
//! ```text
//! 63..62  zero (reserved)     61  has immediate     60  write-with-immediate
//! 59..50  generation          49..32  sender index  31..0  immediate
//! ```
//!
//! A message of an older generation (sent before a reconnect, and still
//! in UCX's unexpected queue or in flight) matches no receive of the new
//! connection: a zero-length *sweeper* receive posted for the previous
//! generation takes it, and it is dropped and counted
//! (`UcxTransport::stale_messages`). A receive of the shared pool matches
//! any sender and generation, so the engine checks each one it takes.
//!
//! Receives live here too ([`Receives`]): posted on the worker with the
//! tag and mask of their sender, held by slot until UCX reports them.

use ferrovia_channel::transport::{Completion, RecvOp};
use ferrovia_types::Sge;

use crate::engine::token::{RECV, token};
use crate::ucp::events::{self, Event};
use crate::ucp::{self, Iov, Received, Request, Status, Worker, vendor_err, wc_status};

/// Set when the message carries an immediate.
pub(crate) const HAS_IMM: u64 = 1 << 61;
/// Set on the notification that ends a write with immediate.
pub(crate) const WRITE_IMM: u64 = 1 << 60;
const SENDER_BITS: u64 = 18;
/// The most peers a transport can address.
pub(crate) const MAX_PEERS: usize = 1 << SENDER_BITS;
const SENDER_MASK: u64 = ((1 << SENDER_BITS) - 1) << 32;
const GEN_BITS: u64 = 10;
const GEN_SHIFT: u64 = 32 + SENDER_BITS;
const GEN_MASK: u64 = ((1 << GEN_BITS) - 1) << GEN_SHIFT;
const RESERVED: u64 = 0b11 << 62;

/// The generation as the tag carries it (its low bits: generations wrap).
pub(crate) fn tag_generation(generation: u32) -> u64 {
    (u64::from(generation) << GEN_SHIFT) & GEN_MASK
}

/// The tag of a message from `sender` on a connection of `generation`.
pub(crate) fn send_tag(sender: usize, generation: u32, imm: Option<u32>, write: bool) -> u64 {
    let mut t = (sender as u64) << 32 | tag_generation(generation);
    if let Some(imm) = imm {
        t |= HAS_IMM | u64::from(imm);
    }
    if write {
        t |= WRITE_IMM;
    }
    t
}

/// Tag and mask of a receive for messages from `sender` on its connection
/// of `generation`.
pub(crate) fn recv_match(sender: usize, generation: u32) -> (u64, u64) {
    (
        (sender as u64) << 32 | tag_generation(generation),
        SENDER_MASK | GEN_MASK | RESERVED,
    )
}

/// Whether a received tag names `generation`.
pub(crate) fn is_generation(tag: u64, generation: u32) -> bool {
    tag & GEN_MASK == tag_generation(generation)
}

/// The peer of a receive from the shared pool: any sender.
pub(crate) const ANY: usize = usize::MAX;

/// Tag and mask of a receive for a message from any sender.
pub(crate) fn recv_match_any() -> (u64, u64) {
    (0, RESERVED)
}

/// The sender a received tag names.
pub(crate) fn sender_of(tag: u64) -> usize {
    ((tag & SENDER_MASK) >> 32) as usize
}

/// The immediate a received tag carries.
pub(crate) fn imm_of(tag: u64) -> Option<u32> {
    (tag & HAS_IMM != 0).then_some(tag as u32)
}

/// Whether the received message is a write-with-immediate notification.
pub(crate) fn is_write_imm(tag: u64) -> bool {
    tag & WRITE_IMM != 0
}

/// What a posted receive is for.
#[derive(Clone, Copy)]
enum Purpose {
    /// A receive of one peer's messages (the current generation's).
    Peer,
    /// A receive of the shared pool; its op is kept, so a stale message it
    /// took can be dropped and the receive posted again.
    Pool(RecvOp),
    /// A zero-length receive taking `peer`'s messages of an older
    /// generation, which are dropped.
    Sweeper(u32),
}

/// A posted receive.
struct RecvState {
    peer: usize,
    wr_id: u64,
    purpose: Purpose,
    /// The request while UCX holds it; `None` once completed or cancelled.
    request: Option<Request>,
    iov: Option<Iov>,
}

/// How a receive ended, for the engine to act on.
pub(crate) enum Finished {
    /// A receive of one peer's: its completion.
    Done { completion: Completion, peer: usize },
    /// A receive of the pool took a message (or failed): the engine checks
    /// the sender's connection and generation before reporting it.
    Pooled {
        completion: Completion,
        /// The sender and generation the tag named, if it named any.
        sender: Option<(usize, u64)>,
        op: RecvOp,
    },
    /// A sweeper of `peer`'s `generation` ended: it took a stale message
    /// (`took`), or was cancelled.
    Swept {
        peer: usize,
        generation: u32,
        took: bool,
    },
}

/// The receives UCX holds, by slot (the index of their token).
#[derive(Default)]
pub(crate) struct Receives {
    slots: Vec<Option<RecvState>>,
    free: Vec<u32>,
    /// Receives of the shared pool UCX holds.
    pooled: u32,
    /// The pool's armed low watermark, and whether it was crossed.
    limit: Option<u32>,
    limit_hit: bool,
}

impl Receives {
    /// Posts `op` for `peer`'s messages of `generation` on `worker` (any
    /// sender's, for the pool: `peer` [`ANY`]); its end is reported as an
    /// event (by UCX's callback, or at once if it ended in the call).
    pub(crate) fn post(&mut self, worker: Worker, peer: usize, generation: u32, op: &RecvOp) {
        let purpose = if peer == ANY {
            Purpose::Pool(*op)
        } else {
            Purpose::Peer
        };
        self.post_as(worker, peer, generation, op.wr_id, op.sges(), purpose);
    }

    /// Posts a sweeper for `peer`'s messages of `generation`, an old one.
    pub(crate) fn post_sweeper(&mut self, worker: Worker, peer: usize, generation: u32) {
        self.post_as(
            worker,
            peer,
            generation,
            0,
            &[],
            Purpose::Sweeper(generation),
        );
    }

    fn post_as(
        &mut self,
        worker: Worker,
        peer: usize,
        generation: u32,
        wr_id: u64,
        sges: &[Sge],
        purpose: Purpose,
    ) {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        let state = self.slots[slot as usize].insert(RecvState {
            peer,
            wr_id,
            purpose,
            request: None,
            iov: None,
        });
        let layout = ucp::layout(sges, &mut state.iov);
        let (t, (tag, mask)) = if peer == ANY {
            self.pooled += 1;
            (token(RECV, 0, slot), recv_match_any())
        } else {
            (token(RECV, peer, slot), recv_match(peer, generation))
        };
        // SAFETY: the engine passes its live worker, used under its lock;
        // the buffers stay valid until the receive completes or is
        // cancelled (the contract of `Transport::post_recv`, which the
        // transport's caller keeps; a sweeper names none); the iovec lives
        // in the slot until then.
        match unsafe { worker.tag_recv(layout, tag, mask, t, peer == ANY) } {
            Received::Done { status, len, tag } => {
                let mut ev = Event::new(t, status);
                ev.len = len;
                ev.tag = tag;
                events::push(ev);
            }
            Received::Pending(req) => state.request = Some(req),
            Received::Failed(s) => events::push(Event::new(t, s)),
        }
    }

    /// How the receive in `slot`, which `ev` reports ended, ended; `None`
    /// if there is none (a stale or forged token).
    pub(crate) fn finish(&mut self, slot: u32, ev: &Event) -> Option<Finished> {
        let state = self.slots.get_mut(slot as usize).and_then(Option::take)?;
        self.free.push(slot);
        let ok = ev.status == Status::OK;
        let truncated = ev.status == Status::MESSAGE_TRUNCATED;
        if let Purpose::Sweeper(generation) = state.purpose {
            return Some(Finished::Swept {
                peer: state.peer,
                generation,
                took: ok || truncated,
            });
        }
        let write = ok && is_write_imm(ev.tag);
        // A pooled receive names its sender, also when the message was
        // too long (UCX reports its tag then too).
        let sender = if state.peer == ANY {
            self.pooled -= 1;
            if self.limit.is_some_and(|l| self.pooled < l) {
                self.limit = None;
                self.limit_hit = true;
            }
            (ok || truncated).then(|| (sender_of(ev.tag), ev.tag))
        } else {
            None
        };
        let completion = Completion {
            wr_id: state.wr_id,
            status: wc_status(ev.status),
            vendor_err: vendor_err(ev.status),
            byte_len: if ok && !write { ev.len as u32 } else { 0 },
            imm: if ok { imm_of(ev.tag) } else { None },
            peer: sender.map(|(s, _)| s as u32),
        };
        Some(match state.purpose {
            Purpose::Pool(op) => Finished::Pooled {
                completion,
                sender,
                op,
            },
            _ => Finished::Done {
                completion,
                peer: state.peer,
            },
        })
    }

    /// Arms the pool's low watermark (see `Transport::arm_shared_limit`).
    pub(crate) fn arm_limit(&mut self, limit: u32) {
        self.limit_hit = false;
        if self.pooled < limit {
            self.limit_hit = true;
        } else {
            self.limit = Some(limit);
        }
    }

    /// Whether the pool fell below its armed limit since it was armed.
    pub(crate) fn take_limit_hit(&mut self) -> bool {
        std::mem::take(&mut self.limit_hit)
    }

    /// Cancels the receives UCX holds for `peer` (all of them if `None`,
    /// the pool's with `Some(ANY)`), sweepers included; their callbacks
    /// report the cancellations.
    pub(crate) fn cancel(&mut self, worker: Worker, peer: Option<usize>) {
        for r in self.slots.iter_mut().flatten() {
            if peer.is_none_or(|p| p == r.peer)
                && let Some(req) = r.request.take()
            {
                // SAFETY: a receive request UCX still holds (its pointer is
                // cleared here, so it is cancelled once) on the engine's
                // worker; its callback reports the cancellation.
                unsafe { worker.cancel(req) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_matches_only_its_sender() {
        let (tag, mask) = recv_match(5, 3);
        for (sender, imm, write) in [
            (5, None, false),
            (5, Some(u32::MAX), true),
            (5, Some(0), false),
        ] {
            let t = send_tag(sender, 3, imm, write);
            assert_eq!(t & mask, tag & mask);
            assert_eq!(imm_of(t), imm);
            assert_eq!(is_write_imm(t), write);
            assert_eq!(sender_of(t), sender);
            assert!(is_generation(t, 3));
        }
        for other in [4, 6, MAX_PEERS - 1] {
            assert_ne!(send_tag(other, 3, Some(7), false) & mask, tag);
        }
    }

    #[test]
    fn a_receive_matches_only_its_generation() {
        let (tag, mask) = recv_match(5, 1);
        for stale in [0, 2, 1 + (1 << GEN_BITS) - 1] {
            let t = send_tag(5, stale, Some(9), false);
            assert_ne!(t & mask, tag, "generation {stale}");
            assert!(!is_generation(t, 1));
        }
        // Generations wrap in the tag.
        assert_eq!(
            send_tag(5, 1 + (1 << GEN_BITS), None, false) & mask,
            tag & mask
        );
        // The pool takes every sender and generation.
        let (any, any_mask) = recv_match_any();
        assert_eq!(send_tag(MAX_PEERS - 1, 1023, Some(1), true) & any_mask, any);
    }
}
