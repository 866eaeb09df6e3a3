//! Per-peer send-queue state of the progress thread: what makes UCX
//! behave like an RC queue pair.
//!
//! - Completions leave in posting order (an unsignalled op is complete
//!   once a later one of the same peer is), whatever order UCX finishes
//!   them in.
//! - A write completes only after a flush of the endpoint that followed it
//!   (remote completion, as an RC ACK), and a later send, read or
//!   write-with-immediate notification is issued only once earlier writes
//!   are flushed, so what the peer receives is never ahead of the data.

use std::collections::{HashMap, VecDeque};

use ferrovia_channel::{OpKind, SendOp};

use crate::ffi;
use crate::keys::KeyInfo;

/// A peer's registration, as this side knows it.
pub(crate) enum RemoteKey {
    /// Asked for; ops using it wait.
    Requested,
    /// Unpacked on the endpoint.
    Ready {
        rkey: ffi::ucp_rkey_h,
        info: KeyInfo,
    },
    /// The peer has no such registration.
    Missing,
    /// The peer revoked it (deregistered, or shut down): accesses fail
    /// before UCX sees them, and a late reply does not bring it back.
    Revoked,
}

/// One posted send-queue operation.
pub(crate) struct SqEntry {
    pub(crate) op: SendOp,
    pub(crate) seq: u32,
    pub(crate) issued: bool,
    /// UCX requests of this op not yet complete.
    pub(crate) outstanding: u32,
    /// Writes: an endpoint flush after it completed.
    pub(crate) flushed: bool,
    /// Writes with immediate: the notification completed.
    pub(crate) notified: bool,
    /// The first error, `UCS_OK` if none.
    pub(crate) status: ffi::ucs_status_t,
    /// The iovec of a multi-element send, alive until UCX completes it.
    pub(crate) iov: Option<Box<[ffi::ucp_dt_iov; ferrovia_channel::MAX_ELEMENTS]>>,
}

impl SqEntry {
    pub(crate) fn new(op: SendOp, seq: u32) -> SqEntry {
        SqEntry {
            op,
            seq,
            issued: false,
            outstanding: 0,
            flushed: false,
            notified: false,
            status: ffi::UCS_OK,
            iov: None,
        }
    }

    pub(crate) fn is_write(&self) -> bool {
        self.op.kind == OpKind::Write
    }

    /// Whether UCX is done with it and its completion may be reported.
    pub(crate) fn done(&self) -> bool {
        if !self.issued {
            return self.status != ffi::UCS_OK;
        }
        self.outstanding == 0
            && (!self.is_write() || (self.flushed && (self.op.imm.is_none() || self.notified)))
    }

    pub(crate) fn fail(&mut self, status: ffi::ucs_status_t) {
        if self.status == ffi::UCS_OK {
            self.status = status;
        }
    }
}

/// Everything the progress thread keeps per peer.
pub(crate) struct Peer {
    pub(crate) ep: ffi::ucp_ep_h,
    /// Set once the endpoint failed or was flushed: everything completes
    /// with an error from then on.
    pub(crate) failed: Option<ffi::ucs_status_t>,
    pub(crate) queue: VecDeque<SqEntry>,
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
    pub(crate) keys: HashMap<u32, RemoteKey>,
    /// The peer said goodbye: it accesses nothing of ours any more.
    pub(crate) departed: bool,
}

impl Peer {
    pub(crate) fn new(ep: ffi::ucp_ep_h) -> Peer {
        Peer {
            ep,
            failed: None,
            queue: VecDeque::new(),
            base: 0,
            cursor: 0,
            unflushed: 0,
            gate: false,
            flush_needed: false,
            last_write: 0,
            keys: HashMap::new(),
            departed: false,
        }
    }

    /// Appends an op; its sequence number.
    pub(crate) fn push(&mut self, op: SendOp) -> u32 {
        let seq = self.base.wrapping_add(self.queue.len() as u32);
        self.queue.push_back(SqEntry::new(op, seq));
        seq
    }

    pub(crate) fn entry_mut(&mut self, seq: u32) -> Option<&mut SqEntry> {
        let idx = seq.wrapping_sub(self.base) as usize;
        self.queue.get_mut(idx)
    }

    /// A flush covering writes up to `upto` completed with `status`;
    /// returns the sequence numbers of writes with immediate now due their
    /// notification.
    pub(crate) fn flushed(&mut self, upto: u32, status: ffi::ucs_status_t) -> Vec<u32> {
        let mut notify = Vec::new();
        let issued = self.cursor;
        for e in self.queue.iter_mut().take(issued) {
            if !e.is_write() || !e.issued || e.flushed || !seq_le(e.seq, upto) {
                continue;
            }
            e.flushed = true;
            self.unflushed = self.unflushed.saturating_sub(1);
            if status != ffi::UCS_OK {
                e.fail(status);
            }
            if e.op.imm.is_some() {
                if e.status == ffi::UCS_OK {
                    notify.push(e.seq);
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
        while self.queue.front().is_some_and(SqEntry::done) {
            if let Some(e) = self.queue.pop_front() {
                report(&e);
            }
            self.base = self.base.wrapping_add(1);
            self.cursor = self.cursor.saturating_sub(1);
        }
    }

    /// Marks the peer failed: queued ops fail with `status` when pumped,
    /// writes stop waiting for flushes.
    pub(crate) fn fail(&mut self, status: ffi::ucs_status_t) {
        self.failed = Some(status);
        let issued = self.cursor;
        for e in self.queue.iter_mut().take(issued) {
            if e.is_write() && !(e.flushed && (e.op.imm.is_none() || e.notified)) {
                e.flushed = true;
                e.notified = true;
                e.fail(ffi::UCS_ERR_CANCELED);
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
        p.retire(|e| v.push(e.op.wr_id));
        v
    }

    #[test]
    fn completions_leave_in_posting_order() {
        let mut p = Peer::new(std::ptr::null_mut());
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
        let mut p = Peer::new(std::ptr::null_mut());
        let w = p.push(op(OpKind::Write, 7, Some(9), true));
        p.cursor = 1;
        let e = p.entry_mut(w).unwrap();
        e.issued = true;
        p.unflushed = 1;
        p.gate = true;
        assert!(retired(&mut p).is_empty());
        assert_eq!(p.flushed(w, ffi::UCS_OK), [w]);
        assert_eq!(p.unflushed, 0);
        assert!(retired(&mut p).is_empty(), "the notification is still out");
        p.entry_mut(w).unwrap().notified = true;
        assert_eq!(retired(&mut p), [7]);
    }

    #[test]
    fn a_failed_peer_releases_waiting_writes() {
        let mut p = Peer::new(std::ptr::null_mut());
        let w = p.push(op(OpKind::Write, 3, None, false));
        p.push(op(OpKind::Send, 4, None, true));
        p.cursor = 1;
        p.entry_mut(w).unwrap().issued = true;
        p.unflushed = 1;
        p.fail(ffi::UCS_ERR_CONNECTION_RESET);
        assert_eq!(retired(&mut p), [3]);
        assert_eq!(p.queue.front().map(|e| e.op.wr_id), Some(4));
    }

    #[test]
    fn sequence_space_wraps() {
        assert!(seq_le(u32::MAX, 0));
        assert!(seq_le(5, 5));
        assert!(!seq_le(6, 5));
    }
}
