//! The direct path's fast lane: ops done on a same-host peer's mapped
//! memory (`crate::mapped`) without entering the peer's queue at all, when
//! nothing of that peer's is outstanding. They need no sequence number, no
//! entry, no flush and no retirement: an op done inside the call is
//! complete when the call returns, and with the queue empty it overtakes
//! nothing (`crate::peer`'s ordering rules hold trivially).
//!
//! The lane also keeps the worker turning: a thread whose every op takes
//! it never polls UCX, so every [`TURN_EVERY`] direct ops it takes a turn
//! itself (commands, `ucp_worker_progress`, events), and a peer's key
//! request or revocation is never left waiting on it.

use ferrovia_channel::transport::{Completion, OpKind, SendOp};
use ferrovia_types::AccessFlags;

use super::{Engine, send_completion};
use crate::ucp::Status;

/// Direct ops between two turns of the worker that the lane takes itself.
const TURN_EVERY: u32 = 64;

/// The right an op of `kind` needs, if the lane can take it.
#[inline]
fn lane_right(op: &SendOp) -> Option<AccessFlags> {
    match op.kind {
        // A write with immediate notifies the peer with a message: the
        // queue's path, which orders the two.
        OpKind::Write if op.imm.is_none() => Some(AccessFlags::REMOTE_WRITE),
        OpKind::Read => Some(AccessFlags::REMOTE_READ),
        OpKind::FetchAdd | OpKind::CompareSwap => Some(AccessFlags::REMOTE_ATOMIC),
        _ => None,
    }
}

impl Engine {
    /// Does the longest prefix of `ops` (to `peer`, in range) it can
    /// directly; how many. Signalled ones complete into `ready`, in order.
    /// Only while `peer`'s queue is empty and no command waits (a command
    /// queued earlier by this thread would be overtaken).
    #[inline]
    pub(super) fn direct_prefix(&mut self, peer: usize, ops: &[SendOp]) -> usize {
        self.lane(peer, ops, &mut []).0
    }

    /// [`Engine::direct_prefix`], the completions of signalled ops going
    /// to `out` while it has room, then to `ready`: (ops done, completions
    /// written to `out`). The caller makes sure nothing handed out later
    /// precedes them (`ready` empty, or `out` empty).
    #[inline(always)]
    fn lane(&mut self, peer: usize, ops: &[SendOp], out: &mut [Completion]) -> (usize, usize) {
        if !self.map_keys || !self.shared.cmds.is_empty() {
            return (0, 0);
        }
        let Engine {
            peers,
            ready,
            stats,
            ..
        } = self;
        let p = &mut peers[peer];
        if !p.queue.is_empty() || p.failed.is_some() {
            return (0, 0);
        }
        let (mut done, mut written) = (0, 0);
        for op in ops {
            if !Self::direct_one(p, op) {
                break;
            }
            if op.signaled {
                let c = send_completion(op.wr_id, Status::OK);
                match out.get_mut(written) {
                    Some(slot) => {
                        *slot = c;
                        written += 1;
                    }
                    None => ready.push_back(c),
                }
            }
            done += 1;
        }
        stats.mapped_accesses += done as u64;
        self.direct_since_turn = self.direct_since_turn.wrapping_add(done as u32);
        (done, written)
    }

    /// Does one op directly if its key is mapped and the access is in
    /// range and granted; whether it did. A refused access is left to the
    /// queue's path, which fails it with its status.
    #[inline(always)]
    fn direct_one(p: &mut crate::peer::Peer, op: &SendOp) -> bool {
        let Some(need) = lane_right(op) else {
            return false;
        };
        let Some(lane) = p.keys.lane(op.rkey) else {
            return false;
        };
        let total = match op.sges() {
            [one] => u64::from(one.length()),
            many => many.iter().map(|s| u64::from(s.length())).sum(),
        };
        let Some(at) = lane.target(op.remote_addr, total, need) else {
            return false;
        };
        // SAFETY: `at` is the op's range in a key that is ready (its rkey
        // live, not revoked: the lane key is forgotten with the table
        // entry, which a revocation empties before it is acknowledged),
        // and the engine's lock is held by the caller; the op's local
        // buffers stay valid for it (the contract of
        // `Transport::post_send`).
        unsafe { crate::mapped::access(op, at) }
    }

    /// Posts `ops` to `peer` (as [`Engine::post_sends`]) and takes up to
    /// `out.len()` completions (as [`Engine::take_completions`]). When
    /// nothing waits to be handed out, what the lane does completes
    /// straight into `out`, in order, with no trip through `ready`.
    #[inline]
    pub(crate) fn post_and_take(
        &mut self,
        peer: usize,
        ops: &[SendOp],
        out: &mut [Completion],
    ) -> usize {
        if peer >= self.peers.len() || !self.ready.is_empty() || !self.shared.done.is_empty() {
            self.post_sends(peer, ops);
            return self.take_completions(out);
        }
        let (done, mut n) = self.lane(peer, ops, out);
        if done == ops.len() {
            self.stats.direct_posts += 1;
            self.turn_if_due();
            return n;
        }
        self.post_sends(peer, &ops[done..]);
        n += self.take_completions(&mut out[n..]);
        n
    }

    /// One op to `peer` on the lane, its completion (if signalled) into
    /// `out`: how many completions it wrote, or `None` (nothing done) when
    /// the lane cannot take it or anything waits before it (then the
    /// general path posts it). The common case of a single post, kept
    /// apart from [`Engine::post_and_take`] so it stays small.
    #[inline]
    pub(crate) fn lane_one(
        &mut self,
        peer: usize,
        op: &SendOp,
        out: &mut Completion,
    ) -> Option<usize> {
        if !self.map_keys
            || !self.ready.is_empty()
            || !self.shared.done.is_empty()
            || !self.shared.cmds.is_empty()
        {
            return None;
        }
        let p = self.peers.get_mut(peer)?;
        if !p.queue.is_empty() || p.failed.is_some() || !Self::direct_one(p, op) {
            return None;
        }
        self.stats.mapped_accesses += 1;
        self.stats.direct_posts += 1;
        self.direct_since_turn = self.direct_since_turn.wrapping_add(1);
        let n = if op.signaled {
            *out = send_completion(op.wr_id, Status::OK);
            1
        } else {
            0
        };
        if self.direct_since_turn >= TURN_EVERY {
            self.turn();
            if self.shared.events.armed() {
                self.publish();
            }
        }
        Some(n)
    }

    /// Takes a turn of the worker if the lane has gone [`TURN_EVERY`] ops
    /// without one.
    #[inline]
    pub(crate) fn turn_if_due(&mut self) {
        if self.direct_since_turn >= TURN_EVERY {
            self.turn();
        }
    }
}
