//! The send pipeline: a peer's send-queue ops, issued in order as their
//! keys, the gate of a write with immediate and earlier writes' flushes
//! allow (the rules are `crate::peer`'s), and the endpoint flushes that
//! complete writes.

use ferrovia_channel::transport::{OpKind, SendOp};
use ferrovia_types::AccessFlags;

use super::token::{FLUSH, NOTIFY, PART, token};
use super::{Engine, send_completion};
use crate::control::Control;
use crate::peer::{Lookup, RemoteKey};
use crate::tag;
use crate::ucp::{self, Atomic, REMOTE_ACCESS, Rkey, Started, Status, events};

impl Engine {
    /// Posts `ops` to `peer`'s send queue from the caller's thread, which
    /// holds the engine: commands queued while someone else held it go
    /// first (they were posted earlier), then these are issued as far as
    /// the ordering rules allow, with one endpoint flush after the writes
    /// among them.
    pub(crate) fn post_sends(&mut self, peer: usize, ops: &[SendOp]) {
        self.stats.direct_posts += 1;
        self.drain_commands();
        if peer >= self.peers.len() {
            for op in ops {
                self.complete(send_completion(op.wr_id, Status::INVALID_PARAM));
            }
            return;
        }
        // What the direct lane can do goes first, without entering the
        // queue; the rest (if any) takes the queue's path.
        let ops = &ops[self.direct_prefix(peer, ops)..];
        if ops.is_empty() {
            self.turn_if_due();
            return;
        }
        for op in ops {
            let p = &mut self.peers[peer];
            if !p.waiting.is_empty() {
                p.push(*op);
                continue;
            }
            // Nothing waits before it: issue it straight from the caller's
            // op, so only its small entry is queued. What is done goes
            // first, so an op with nothing outstanding before it is at the
            // front (and may take the direct path).
            self.retire(peer);
            let p = &mut self.peers[peer];
            p.push_entry(op);
            let idx = p.cursor;
            if self.issue(peer, idx, op) {
                self.peers[peer].cursor += 1;
            } else {
                self.peers[peer].waiting.push_back(*op);
            }
        }
        self.service(peer);
        self.retire(peer);
        // What the calls recorded (a key request's control message) is
        // handled now: no event stays behind in this thread's list once
        // it lets go of the engine.
        if events::pending() {
            self.handle_events();
        }
    }

    /// Queues an op that came as a command.
    pub(super) fn enqueue(&mut self, peer: usize, op: SendOp) {
        let Some(p) = self.peers.get_mut(peer) else {
            self.complete(send_completion(op.wr_id, Status::INVALID_PARAM));
            return;
        };
        p.push(op);
        self.mark(peer);
    }

    /// Issues what `peer`'s queue allows, flushing after writes; when a
    /// flush completes inside the call, issues what it released.
    pub(super) fn service(&mut self, peer: usize) {
        loop {
            self.pump(peer);
            if !self.flush_if_needed(peer) {
                return;
            }
        }
    }

    /// Issues the waiting ops of `peer`'s queue that can be, in order.
    fn pump(&mut self, peer: usize) {
        while let Some(&op) = self.peers[peer].waiting.front() {
            self.retire(peer);
            let idx = self.peers[peer].cursor;
            if !self.issue(peer, idx, &op) {
                return;
            }
            let p = &mut self.peers[peer];
            p.waiting.pop_front();
            p.cursor += 1;
        }
    }

    /// Issues `op`, whose entry is `queue[idx]`, if the ordering rules let
    /// it go now (or fails it if it cannot go at all); whether it went.
    fn issue(&mut self, peer: usize, idx: usize, op: &SendOp) -> bool {
        let p = &mut self.peers[peer];
        let e = &mut p.queue[idx];
        if let Some(status) = p.failed {
            e.fail(status);
            return true;
        }
        if p.gate {
            return false;
        }
        match op.kind {
            OpKind::Send => {
                if p.unflushed > 0 {
                    return false;
                }
                self.issue_send(peer, idx, op);
            }
            kind @ (OpKind::Write | OpKind::Read | OpKind::FetchAdd | OpKind::CompareSwap) => {
                let key = op.rkey;
                match p.keys.lookup(key) {
                    Lookup::Unknown => {
                        p.keys.insert(key, RemoteKey::Requested);
                        let me = self.me as u32;
                        self.send_control(peer, Control::Request { from: me, key }.encode());
                        return false;
                    }
                    Lookup::Requested => return false,
                    Lookup::Refused => e.fail(REMOTE_ACCESS),
                    Lookup::Ready(rkey, info, mapped) => {
                        let need = match kind {
                            OpKind::Write => AccessFlags::REMOTE_WRITE,
                            OpKind::Read => AccessFlags::REMOTE_READ,
                            _ => AccessFlags::REMOTE_ATOMIC,
                        };
                        let total = op.sges().iter().map(|s| u64::from(s.length())).sum();
                        match info.translate(op.remote_addr, total, need) {
                            None => e.fail(REMOTE_ACCESS),
                            Some(addr) => {
                                // Reads and atomics see every earlier write
                                // (RC orders them on the QP): they wait for
                                // the writes' flush.
                                if kind != OpKind::Write && p.unflushed > 0 {
                                    return false;
                                }
                                // Nothing of the peer's is outstanding before
                                // it (it is at the front): done here, on the
                                // peer's mapped memory, if it can be.
                                if idx == 0
                                    && let Some(at) = mapped.and_then(|m| {
                                        m.lane_key(key, info).target(op.remote_addr, total, need)
                                    })
                                    // SAFETY: `at` is the op's range in a
                                    // key that is ready (its rkey live, not
                                    // revoked) and the engine's lock is
                                    // held; the local buffers stay valid
                                    // for the op (the caller's contract).
                                    && unsafe { crate::mapped::access(op, at) }
                                {
                                    e.issued = true;
                                    e.flushed = true;
                                    self.stats.mapped_accesses += 1;
                                    return true;
                                }
                                if kind == OpKind::FetchAdd || kind == OpKind::CompareSwap {
                                    self.issue_atomic(peer, idx, op, rkey, addr);
                                } else {
                                    self.issue_rma(peer, idx, op, rkey, addr);
                                }
                            }
                        }
                    }
                }
            }
        }
        true
    }

    fn issue_send(&mut self, peer: usize, idx: usize, op: &SendOp) {
        let me = self.me;
        let p = &mut self.peers[peer];
        let (ep, generation) = (p.live_ep(), p.generation);
        let e = &mut p.queue[idx];
        let t = token(PART, peer, e.seq);
        e.issued = true;
        let tag = tag::send_tag(me, generation, op.imm, false);
        let layout = ucp::layout(op.sges(), &mut e.iov);
        // SAFETY: the endpoint is live (the peer has not failed); the
        // buffers stay valid until the op completes (the caller's
        // contract), and the iovec lives in the entry until then.
        let r = unsafe { ep.tag_send(layout, tag, t) };
        // What ended inside the call is applied here (no callback runs for
        // it); a pending part's callback reports it as an event.
        match r {
            Started::Done => {}
            Started::Pending(_) => e.outstanding = 1,
            Started::Failed(st) => e.fail(st),
        }
    }

    #[inline]
    fn issue_rma(&mut self, peer: usize, idx: usize, op: &SendOp, rkey: Rkey, addr: u64) {
        let p = &mut self.peers[peer];
        let ep = p.live_ep();
        let e = &mut p.queue[idx];
        let t = token(PART, peer, e.seq);
        e.issued = true;
        let write = e.is_write();
        let mut remote = addr;
        for s in op.sges() {
            let (local, len) = (s.addr() as usize as *mut u8, s.length() as usize);
            // SAFETY: live endpoint and unpacked rkey; the range was checked
            // against the peer's registration; the local buffer stays valid
            // until the op completes (the caller's contract).
            let r = unsafe {
                if write {
                    ep.put(local, len, remote, rkey, t)
                } else {
                    ep.get(local, len, remote, rkey, t)
                }
            };
            match r {
                Started::Done => {}
                Started::Pending(_) => e.outstanding += 1,
                Started::Failed(st) => e.fail(st),
            }
            remote += len as u64;
        }
        if write {
            let (seq, imm) = (e.seq, e.imm.is_some());
            p.unflushed += 1;
            p.flush_needed = true;
            p.last_write = seq;
            p.gate |= imm;
        }
    }

    /// Issues a fetch-and-add or compare-and-swap on the 8-byte word at
    /// `addr`; the original value lands in the op's 8-byte result buffer.
    fn issue_atomic(&mut self, peer: usize, idx: usize, op: &SendOp, rkey: Rkey, addr: u64) {
        let p = &mut self.peers[peer];
        let ep = p.live_ep();
        let e = &mut p.queue[idx];
        e.issued = true;
        let Some(result) = op.sges().first().filter(|s| s.length() == 8) else {
            e.fail(Status::INVALID_PARAM);
            return;
        };
        let result = result.addr() as usize as *mut u64;
        let opcode = if op.kind == OpKind::CompareSwap {
            // UCX takes the swap value in the reply buffer.
            // SAFETY: the result buffer is the op's own 8 bytes, which the
            // transport may write until the op completes (the caller's
            // contract); it may be unaligned for a u64.
            unsafe { result.write_unaligned(op.swap) };
            Atomic::CompareSwap
        } else {
            Atomic::Add
        };
        let operand: *const u64 = &**e.operand.insert(Box::new(op.compare_add));
        let t = token(PART, peer, e.seq);
        // SAFETY: live endpoint and unpacked rkey; the word was checked
        // against the peer's registration (range and atomic right); the
        // operand is boxed in the entry and the result buffer stays valid,
        // both until the op completes.
        let r = unsafe { ep.atomic(opcode, operand, addr, rkey, result, t) };
        match r {
            Started::Done => {}
            Started::Pending(_) => e.outstanding = 1,
            Started::Failed(st) => e.fail(st),
        }
    }

    /// Flushes `peer`'s endpoint if writes were issued since the last
    /// flush: one flush covers all of them (a list of writes costs one).
    /// Whether the flush completed inside the call (then the writes it
    /// covers are flushed already).
    fn flush_if_needed(&mut self, peer: usize) -> bool {
        let p = &mut self.peers[peer];
        if !p.flush_needed || p.failed.is_some() {
            return false;
        }
        p.flush_needed = false;
        self.stats.endpoint_flushes += 1;
        let upto = p.last_write;
        let t = token(FLUSH, peer, upto);
        // SAFETY: live endpoint, used under the engine's lock.
        let r = unsafe { p.live_ep().flush(t) };
        let status = match r {
            Started::Pending(_) => return false,
            Started::Done => Status::OK,
            Started::Failed(st) => st,
        };
        self.flushed(peer, upto, status);
        true
    }

    /// A flush of `peer`'s endpoint covering writes up to `upto` ended
    /// with `status`: those writes are flushed, and a write with immediate
    /// among them sends its notification.
    pub(super) fn flushed(&mut self, peer: usize, upto: u32, status: Status) {
        if let Some(seq) = self.peers[peer].flushed(upto, status) {
            self.notify(peer, seq);
        }
        self.mark(peer);
    }

    fn notify(&mut self, peer: usize, seq: u32) {
        let me = self.me;
        let p = &mut self.peers[peer];
        let Some(imm) = p.entry_mut(seq).map(|e| e.imm) else {
            return;
        };
        let t = token(NOTIFY, peer, seq);
        let tag = tag::send_tag(me, p.generation, imm, true);
        // SAFETY: live endpoint; a zero-length message names no buffer.
        let r = unsafe { p.live_ep().tag_send_empty(tag, t) };
        p.gate = false;
        let ended = match r {
            Started::Pending(_) => return,
            Started::Done => Status::OK,
            Started::Failed(st) => st,
        };
        if let Some(e) = p.entry_mut(seq) {
            e.notified = true;
            e.fail(ended);
        }
    }

    /// Reports the ops at the front of `peer`'s queue that are done, in
    /// order: signalled ones and failures produce a completion.
    pub(super) fn retire(&mut self, peer: usize) {
        let Engine { peers, ready, .. } = self;
        peers[peer].retire(|e| {
            if e.signaled || e.status != Status::OK {
                ready.push_back(send_completion(e.wr_id, e.status));
            }
        });
    }
}
