//! Per-peer send-queue state of the engine (whichever thread holds it):
//! what makes UCX behave like an RC queue pair.
//!
//! - Completions leave in posting order (an unsignalled op is complete
//!   once a later one of the same peer is), whatever order UCX finishes
//!   them in.
//! - A write completes only after a flush of the endpoint that followed it
//!   (remote completion, as an RC ACK), and a later send, read or
//!   write-with-immediate notification is issued only once earlier writes
//!   are flushed, so what the peer receives is never ahead of the data.
//!   One flush covers every write issued before it.

use std::collections::VecDeque;
use std::collections::hash_map::{self, HashMap};

use ferrovia_channel::transport::{OpKind, SendOp};

use crate::keys::KeyInfo;
use crate::mapped::{LaneKey, Mapping};
use crate::ucp::{Ep, Iov, Rkey, Status};

/// A peer's registration, as this side knows it.
pub(crate) enum RemoteKey {
    /// Asked for; ops using it wait.
    Requested,
    /// Unpacked on the endpoint; `mapped` where UCX attached the peer's
    /// memory in this process (the direct path, `crate::mapped`), which
    /// leaves the table with the rkey.
    Ready {
        rkey: Rkey,
        info: KeyInfo,
        mapped: Option<Mapping>,
    },
    /// The peer has no such registration.
    Missing,
    /// The peer revoked it (deregistered, or shut down): accesses fail
    /// before UCX sees them, and a late reply does not bring it back.
    Revoked,
}

/// A peer's keys as this side knows them, with the last one used kept at
/// hand: a run of puts or gets with one key (the common case) costs no
/// hash lookup. Every change goes through here and forgets the cached
/// one, so it never outlives a revocation.
#[derive(Default)]
pub(crate) struct RemoteKeys {
    map: HashMap<u32, RemoteKey>,
    /// The key last found ready: its number, rkey, range and rights (the
    /// packed bytes are not copied) and mapping.
    hot: Option<(u32, Rkey, KeyInfo, Option<Mapping>)>,
    /// The hot key as the direct lane uses it, when it is mapped.
    lane: Option<LaneKey>,
}

/// What an access with a key can do now.
pub(crate) enum Lookup<'a> {
    /// Never asked for.
    Unknown,
    /// Asked for; the access waits.
    Requested,
    /// Refused: missing or revoked.
    Refused,
    /// Usable (directly, where mapped).
    Ready(Rkey, &'a KeyInfo, Option<Mapping>),
}

impl RemoteKeys {
    /// What an access with `key` can do now.
    #[inline]
    pub(crate) fn lookup(&mut self, key: u32) -> Lookup<'_> {
        if self.hot.as_ref().is_none_or(|h| h.0 != key) {
            match self.map.get(&key) {
                None => return Lookup::Unknown,
                Some(RemoteKey::Requested) => return Lookup::Requested,
                Some(RemoteKey::Missing | RemoteKey::Revoked) => return Lookup::Refused,
                Some(RemoteKey::Ready { rkey, info, mapped }) => {
                    let window = KeyInfo {
                        packed: Vec::new(),
                        ..*info
                    };
                    self.lane = mapped.map(|m| m.lane_key(key, &window));
                    self.hot = Some((key, *rkey, window, *mapped));
                }
            }
        }
        match &self.hot {
            Some((_, rkey, info, mapped)) => Lookup::Ready(*rkey, info, *mapped),
            None => Lookup::Unknown,
        }
    }

    /// The mapped key `key` as the direct lane uses it, if it is ready
    /// and mapped.
    #[inline(always)]
    pub(crate) fn lane(&mut self, key: u32) -> Option<LaneKey> {
        match self.lane {
            Some(l) if l.key == key => Some(l),
            _ => self.lane_slow(key),
        }
    }

    #[inline(never)]
    fn lane_slow(&mut self, key: u32) -> Option<LaneKey> {
        match self.lookup(key) {
            Lookup::Ready(..) => self.lane,
            _ => None,
        }
    }

    pub(crate) fn get(&self, key: u32) -> Option<&RemoteKey> {
        self.map.get(&key)
    }

    pub(crate) fn insert(&mut self, key: u32, state: RemoteKey) -> Option<RemoteKey> {
        self.hot = None;
        self.lane = None;
        self.map.insert(key, state)
    }

    /// Forgets every key, handing back their states.
    pub(crate) fn drain(&mut self) -> hash_map::Drain<'_, u32, RemoteKey> {
        self.hot = None;
        self.lane = None;
        self.map.drain()
    }

    /// Marks every key revoked; the rkeys that were unpacked go to `dead`.
    pub(crate) fn revoke_all(&mut self, mut dead: impl FnMut(Rkey)) {
        self.hot = None;
        self.lane = None;
        for k in self.map.values_mut() {
            if let RemoteKey::Ready { rkey, .. } = std::mem::replace(k, RemoteKey::Revoked) {
                dead(rkey);
            }
        }
    }
}

/// One posted send-queue operation, as long as it is outstanding: what
/// ordering and completion need (its buffers, remote address and key are
/// in [`Peer::waiting`] until it is issued, and needed no longer).
pub(crate) struct SqEntry {
    pub(crate) wr_id: u64,
    pub(crate) seq: u32,
    pub(crate) imm: Option<u32>,
    pub(crate) kind: OpKind,
    pub(crate) signaled: bool,
    pub(crate) issued: bool,
    /// Writes: an endpoint flush after it completed.
    pub(crate) flushed: bool,
    /// Writes with immediate: the notification completed.
    pub(crate) notified: bool,
    /// The first error, `UCS_OK` if none.
    pub(crate) status: Status,
    /// UCX requests of this op not yet complete.
    pub(crate) outstanding: u32,
    /// The iovec of a multi-element send, alive until UCX completes it.
    pub(crate) iov: Option<Iov>,
    /// An atomic's operand (the value added, or compared), which UCX may
    /// read until the op completes: boxed, so it stays put while the queue
    /// moves.
    pub(crate) operand: Option<Box<u64>>,
}

impl SqEntry {
    pub(crate) fn new(op: &SendOp, seq: u32) -> SqEntry {
        SqEntry {
            wr_id: op.wr_id,
            seq,
            imm: op.imm,
            kind: op.kind,
            signaled: op.signaled,
            issued: false,
            flushed: false,
            notified: false,
            status: Status::OK,
            outstanding: 0,
            iov: None,
            operand: None,
        }
    }

    pub(crate) fn is_write(&self) -> bool {
        self.kind == OpKind::Write
    }

    /// Whether UCX is done with it and its completion may be reported.
    #[inline]
    pub(crate) fn done(&self) -> bool {
        if !self.issued {
            return self.status != Status::OK;
        }
        self.outstanding == 0
            && (!self.is_write() || (self.flushed && (self.imm.is_none() || self.notified)))
    }

    pub(crate) fn fail(&mut self, status: Status) {
        if self.status == Status::OK {
            self.status = status;
        }
    }
}

/// What a peer that has not failed has: its endpoint (failing a peer
/// closes it).
pub(crate) const LIVE: &str = "a peer that has not failed has its endpoint";

/// Everything the engine keeps per peer.
pub(crate) struct Peer {
    /// `None` once the peer failed (its endpoint is closed).
    pub(crate) ep: Option<Ep>,
    /// Set once the endpoint failed or was flushed: everything completes
    /// with an error from then on.
    pub(crate) failed: Option<Status>,
    pub(crate) queue: VecDeque<SqEntry>,
    /// The ops of `queue[cursor..]`, not yet issued, in order.
    pub(crate) waiting: VecDeque<SendOp>,
    /// Sequence number of `queue[0]`.
    pub(crate) base: u32,
    /// Index in `queue` of the next op to issue.
    pub(crate) cursor: usize,
    /// Writes issued and not yet flushed.
    pub(crate) unflushed: u32,
    /// A write with immediate waits for its flush to send its notification;
    /// nothing after it is issued until then.
    pub(crate) gate: bool,
    /// Writes were issued since the last flush.
    pub(crate) flush_needed: bool,
    /// Sequence number of the last write issued.
    pub(crate) last_write: u32,
    pub(crate) keys: RemoteKeys,
    /// The peer said goodbye: it accesses nothing of ours any more.
    pub(crate) departed: bool,
    /// The connection's generation, agreed with the peer at each
    /// reconnect: messages carry it in their tag, receives match only it,
    /// and an error of an older endpoint names an older one and is ignored.
    pub(crate) generation: u32,
    /// Renewed and not yet reconnected: the generation this side proposed
    /// (posts fail meanwhile, as the peer is failed).
    pub(crate) proposed: Option<u32>,
    /// The older generation whose late messages a sweeper receive takes.
    pub(crate) sweeping: Option<u32>,
}

impl Peer {
    /// The state of a renewed endpoint `ep` of `generation` that replaces
    /// `old`: sequence numbers go on from the old ones, so no late event of
    /// the old endpoint names an op of the new one.
    pub(crate) fn renewed(ep: Ep, old: &Peer, generation: u32) -> Peer {
        let mut p = Peer::new(ep);
        p.base = old.base.wrapping_add(old.queue.len() as u32);
        p.last_write = p.base.wrapping_sub(1);
        p.generation = generation;
        p
    }

    pub(crate) fn new(ep: Ep) -> Peer {
        Peer {
            ep: Some(ep),
            failed: None,
            queue: VecDeque::new(),
            waiting: VecDeque::new(),
            base: 0,
            cursor: 0,
            unflushed: 0,
            gate: false,
            flush_needed: false,
            last_write: 0,
            keys: RemoteKeys::default(),
            departed: false,
            generation: 0,
            proposed: None,
            sweeping: None,
        }
    }

    /// The endpoint of a peer that has not failed.
    #[inline]
    pub(crate) fn live_ep(&self) -> Ep {
        self.ep.expect(LIVE)
    }

    /// Appends an op to wait for its turn; its sequence number.
    pub(crate) fn push(&mut self, op: SendOp) -> u32 {
        let seq = self.push_entry(&op);
        self.waiting.push_back(op);
        seq
    }

    /// Appends the entry of an op about to be issued at once (nothing
    /// waits before it): its sequence number. Its index is `cursor`.
    pub(crate) fn push_entry(&mut self, op: &SendOp) -> u32 {
        let seq = self.base.wrapping_add(self.queue.len() as u32);
        self.queue.push_back(SqEntry::new(op, seq));
        seq
    }

    pub(crate) fn entry_mut(&mut self, seq: u32) -> Option<&mut SqEntry> {
        let idx = seq.wrapping_sub(self.base) as usize;
        self.queue.get_mut(idx)
    }

    /// A flush covering writes up to `upto` completed with `status`;
    /// returns the sequence number of a write with immediate now due its
    /// notification. There is at most one: issuing such a write closes the
    /// gate, and nothing is issued after it until its notification is.
    pub(crate) fn flushed(&mut self, upto: u32, status: Status) -> Option<u32> {
        let mut notify = None;
        let issued = self.cursor;
        for e in self.queue.iter_mut().take(issued) {
            if self.unflushed == 0 || !seq_le(e.seq, upto) {
                // Sequence numbers grow along the queue: nothing further
                // is covered.
                break;
            }
            if !e.is_write() || !e.issued || e.flushed {
                continue;
            }
            e.flushed = true;
            self.unflushed -= 1;
            if status != Status::OK {
                e.fail(status);
            }
            if e.imm.is_some() {
                if e.status == Status::OK {
                    debug_assert!(notify.is_none(), "two writes with immediate in one flush");
                    notify = Some(e.seq);
                } else {
                    e.notified = true;
                    self.gate = false;
                }
            }
        }
        notify
    }

    /// Pops completed ops from the front, in order.
    pub(crate) fn retire(&mut self, mut report: impl FnMut(&SqEntry)) {
        while let Some(e) = self.queue.front().filter(|e| e.done()) {
            report(e);
            self.queue.pop_front();
            self.base = self.base.wrapping_add(1);
            self.cursor = self.cursor.saturating_sub(1);
        }
    }

    /// Marks the peer failed: queued ops fail with `status` when pumped,
    /// writes stop waiting for flushes.
    pub(crate) fn fail(&mut self, status: Status) {
        self.failed = Some(status);
        let issued = self.cursor;
        for e in self.queue.iter_mut().take(issued) {
            if e.is_write() && !(e.flushed && (e.imm.is_none() || e.notified)) {
                e.flushed = true;
                e.notified = true;
                e.fail(Status::CANCELED);
            }
        }
        self.unflushed = 0;
        self.gate = false;
        self.flush_needed = false;
    }
}

/// `a <= b` in wrapping sequence space.
pub(crate) fn seq_le(a: u32, b: u32) -> bool {
    b.wrapping_sub(a) < 1 << 31
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrovia_types::Sge;

    fn op(kind: OpKind, wr_id: u64, imm: Option<u32>, signaled: bool) -> SendOp {
        SendOp {
            wr_id,
            kind,
            sges: [Sge::new(0, 0, 0); ferrovia_channel::MAX_ELEMENTS],
            num_sge: 0,
            remote_addr: 0,
            rkey: 1,
            compare_add: 0,
            swap: 0,
            imm,
            signaled,
            inline: false,
        }
    }

    fn retired(p: &mut Peer) -> Vec<u64> {
        let mut v = Vec::new();
        p.retire(|e| v.push(e.wr_id));
        v
    }

    #[test]
    fn completions_leave_in_posting_order() {
        let mut p = Peer::new(Ep::dangling());
        let a = p.push(op(OpKind::Send, 1, None, true));
        let b = p.push(op(OpKind::Send, 2, None, true));
        p.cursor = 2;
        for s in [a, b] {
            let e = p.entry_mut(s).unwrap();
            e.issued = true;
            e.outstanding = 1;
        }
        p.entry_mut(b).unwrap().outstanding = 0;
        assert!(
            retired(&mut p).is_empty(),
            "the second finished first but must wait"
        );
        p.entry_mut(a).unwrap().outstanding = 0;
        assert_eq!(retired(&mut p), [1, 2]);
        assert_eq!((p.base, p.cursor), (2, 0));
    }

    #[test]
    fn a_write_completes_after_its_flush_and_notification() {
        let mut p = Peer::new(Ep::dangling());
        let w = p.push(op(OpKind::Write, 7, Some(9), true));
        p.cursor = 1;
        let e = p.entry_mut(w).unwrap();
        e.issued = true;
        p.unflushed = 1;
        p.gate = true;
        assert!(retired(&mut p).is_empty());
        assert_eq!(p.flushed(w, Status::OK), Some(w));
        assert_eq!(p.unflushed, 0);
        assert!(retired(&mut p).is_empty(), "the notification is still out");
        p.entry_mut(w).unwrap().notified = true;
        assert_eq!(retired(&mut p), [7]);
    }

    #[test]
    fn one_flush_completes_a_batch_of_writes_and_only_it() {
        let mut p = Peer::new(Ep::dangling());
        let seqs: Vec<u32> = (0..16)
            .map(|i| p.push(op(OpKind::Write, i, None, i == 15)))
            .collect();
        // As the engine issues them: puts completed inside the calls.
        for &s in &seqs {
            p.entry_mut(s).unwrap().issued = true;
            p.unflushed += 1;
        }
        p.cursor = 16;
        p.waiting.clear();
        assert!(
            retired(&mut p).is_empty(),
            "no write completes before its flush"
        );
        assert_eq!(p.flushed(seqs[7], Status::OK), None);
        assert_eq!(retired(&mut p), (0..8).collect::<Vec<_>>());
        assert_eq!(p.flushed(seqs[15], Status::OK), None);
        assert_eq!(retired(&mut p), (8..16).collect::<Vec<_>>());
        assert_eq!((p.unflushed, p.cursor), (0, 0));
    }

    #[test]
    fn a_failed_peer_releases_waiting_writes() {
        let mut p = Peer::new(Ep::dangling());
        let w = p.push(op(OpKind::Write, 3, None, false));
        p.push(op(OpKind::Send, 4, None, true));
        p.cursor = 1;
        p.entry_mut(w).unwrap().issued = true;
        p.unflushed = 1;
        p.fail(Status::CONNECTION_RESET);
        assert_eq!(retired(&mut p), [3]);
        assert_eq!(p.queue.front().map(|e| e.wr_id), Some(4));
    }

    #[test]
    fn sequence_space_wraps() {
        assert!(seq_le(u32::MAX, 0));
        assert!(seq_le(5, 5));
        assert!(!seq_le(6, 5));
    }
}
