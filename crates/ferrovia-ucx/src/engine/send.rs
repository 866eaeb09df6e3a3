//! The send pipeline: a peer's send-queue ops, issued in order as their
//! keys, the gate of a write with immediate and earlier writes' flushes
//! allow (the rules are `crate::peer`'s), and the endpoint flushes that
//! complete writes.

use std::ffi::c_void;
use std::ptr::null_mut;

use ferrovia_channel::{OpKind, SendOp};
use ferrovia_types::AccessFlags;

use super::token::{FLUSH, NOTIFY, PART, record, send_param, token};
use super::{Engine, send_completion};
use crate::control::Control;
use crate::ffi;
use crate::peer::RemoteKey;
use crate::status::REMOTE_ACCESS;
use crate::tag;

impl Engine {
    pub(super) fn enqueue(&mut self, peer: usize, op: SendOp) {
        let Some(p) = self.peers.get_mut(peer) else {
            self.shared
                .complete(send_completion(op.wr_id, ffi::UCS_ERR_INVALID_PARAM));
            return;
        };
        p.push(op);
        self.mark(peer);
    }

    /// Issues what can be issued of `peer`'s queue, in order.
    pub(super) fn pump(&mut self, peer: usize) {
        loop {
            let p = &mut self.peers[peer];
            if let Some(status) = p.failed {
                let from = p.cursor;
                for e in p.queue.iter_mut().skip(from) {
                    e.fail(status);
                }
                p.cursor = p.queue.len();
                return;
            }
            if p.gate {
                return;
            }
            let cursor = p.cursor;
            let Some(e) = p.queue.get_mut(cursor) else {
                return;
            };
            match e.op.kind {
                OpKind::Send => {
                    if p.unflushed > 0 {
                        return;
                    }
                    self.issue_send(peer, cursor);
                }
                kind @ (OpKind::Write | OpKind::Read) => {
                    let key = e.op.rkey;
                    match p.keys.get(&key) {
                        None => {
                            p.keys.insert(key, RemoteKey::Requested);
                            let me = self.me as u32;
                            self.send_control(peer, Control::Request { from: me, key }.encode());
                            return;
                        }
                        Some(RemoteKey::Requested) => return,
                        Some(RemoteKey::Missing | RemoteKey::Revoked) => e.fail(REMOTE_ACCESS),
                        Some(RemoteKey::Ready { rkey, info }) => {
                            let need = if kind == OpKind::Write {
                                AccessFlags::REMOTE_WRITE
                            } else {
                                AccessFlags::REMOTE_READ
                            };
                            let total = e.op.sges().iter().map(|s| u64::from(s.length())).sum();
                            match info.translate(e.op.remote_addr, total, need) {
                                None => e.fail(REMOTE_ACCESS),
                                Some(addr) => {
                                    if kind == OpKind::Read && p.unflushed > 0 {
                                        return;
                                    }
                                    let rkey = *rkey;
                                    self.issue_rma(peer, cursor, rkey, addr);
                                }
                            }
                        }
                    }
                }
            }
            self.peers[peer].cursor += 1;
        }
    }

    fn issue_send(&mut self, peer: usize, idx: usize) {
        let me = self.me;
        let p = &mut self.peers[peer];
        let ep = p.ep;
        let e = &mut p.queue[idx];
        let t = token(PART, peer, e.seq);
        e.issued = true;
        e.outstanding = 1;
        let tag = tag::send_tag(me, e.op.imm, false);
        let sges = e.op.sges;
        let n = e.op.num_sge;
        let (buf, count, dt) = tag::layout(&sges[..n], &mut e.iov);
        let mut param = send_param(t);
        param.op_attr_mask |= ffi::UCP_OP_ATTR_FIELD_DATATYPE;
        param.datatype = dt;
        // SAFETY: the endpoint is live (the peer has not failed); the
        // buffers stay valid until the op completes (the caller's
        // contract), and the iovec lives in the entry until then.
        let r = unsafe { ffi::ucp_tag_send_nbx(ep, buf, count, tag, &param) };
        record(t, r);
    }

    fn issue_rma(&mut self, peer: usize, idx: usize, rkey: ffi::ucp_rkey_h, addr: u64) {
        let p = &mut self.peers[peer];
        let ep = p.ep;
        let e = &mut p.queue[idx];
        let t = token(PART, peer, e.seq);
        e.issued = true;
        let write = e.is_write();
        let mut remote = addr;
        for s in e.op.sges() {
            let param = send_param(t);
            let (local, len) = (s.addr() as usize as *mut c_void, s.length() as usize);
            // SAFETY: live endpoint and unpacked rkey; the range was checked
            // against the peer's registration; the local buffer stays valid
            // until the op completes (the caller's contract).
            let r = unsafe {
                if write {
                    ffi::ucp_put_nbx(ep, local, len, remote, rkey, &param)
                } else {
                    ffi::ucp_get_nbx(ep, local, len, remote, rkey, &param)
                }
            };
            e.outstanding += 1;
            record(t, r);
            remote += len as u64;
        }
        if write {
            let (seq, imm) = (e.seq, e.op.imm.is_some());
            p.unflushed += 1;
            p.flush_needed = true;
            p.last_write = seq;
            p.gate |= imm;
        }
    }

    pub(super) fn flush_if_needed(&mut self, peer: usize) {
        let p = &mut self.peers[peer];
        if !p.flush_needed || p.failed.is_some() {
            return;
        }
        p.flush_needed = false;
        let t = token(FLUSH, peer, p.last_write);
        let param = send_param(t);
        // SAFETY: live endpoint owned by this thread.
        let r = unsafe { ffi::ucp_ep_flush_nbx(p.ep, &param) };
        record(t, r);
    }

    pub(super) fn notify(&mut self, peer: usize, seq: u32) {
        let me = self.me;
        let p = &mut self.peers[peer];
        let ep = p.ep;
        let Some(e) = p.entry_mut(seq) else { return };
        let t = token(NOTIFY, peer, seq);
        let tag = tag::send_tag(me, e.op.imm, true);
        let param = send_param(t);
        // SAFETY: live endpoint; a zero-length message names no buffer.
        let r = unsafe { ffi::ucp_tag_send_nbx(ep, null_mut(), 0, tag, &param) };
        p.gate = false;
        record(t, r);
    }
}
