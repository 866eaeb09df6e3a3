//! Tagged messages: sends on an endpoint (`ucp_tag_send_nbx`) and
//! receives on the worker (`ucp_tag_recv_nbx`).

use std::ptr::null_mut;

use super::datatype::Layout;
use super::endpoint::Ep;
use super::events;
use super::ffi;
use super::request::{Request, send_param, user_data};
use super::status::{Started, Status, started};
use super::worker::Worker;

/// How a posted receive started.
pub(crate) enum Received {
    /// It took a message inside the call (`status` OK, or
    /// `MESSAGE_TRUNCATED` when it was too long): its length and the
    /// sender's tag. No callback will run.
    Done {
        status: Status,
        len: usize,
        tag: u64,
    },
    /// UCX holds it; its callback will report it.
    Pending(Request),
    /// It failed inside the call; no callback will run.
    Failed(Status),
}

impl Ep {
    /// `ucp_tag_send_nbx` of the message `layout` describes, tagged `tag`;
    /// the completion callback reports `token`.
    ///
    /// # Safety
    /// See [`Ep`]; the buffers `layout` names (and its iovec) stay valid
    /// until the send completes.
    #[inline]
    pub(crate) unsafe fn tag_send(self, layout: Layout, tag: u64, token: u64) -> Started {
        let mut param = send_param(token);
        param.op_attr_mask |= ffi::UCP_OP_ATTR_FIELD_DATATYPE;
        param.datatype = layout.datatype;
        // SAFETY: the caller's contract: live endpoint, buffers valid
        // until completion.
        started(unsafe { ffi::ucp_tag_send_nbx(self.raw(), layout.buf, layout.count, tag, &param) })
    }

    /// `ucp_tag_send_nbx` of an empty message tagged `tag`; the completion
    /// callback reports `token`.
    ///
    /// # Safety
    /// See [`Ep`].
    #[inline]
    pub(crate) unsafe fn tag_send_empty(self, tag: u64, token: u64) -> Started {
        let param = send_param(token);
        // SAFETY: live endpoint (the caller's contract); a zero-length
        // message names no buffer.
        started(unsafe { ffi::ucp_tag_send_nbx(self.raw(), null_mut(), 0, tag, &param) })
    }
}

impl Worker {
    /// `ucp_tag_recv_nbx` into the buffers `layout` describes, of a
    /// message whose tag matches `tag` under `mask`; the callback reports
    /// `token`, with the received length and the sender's tag.
    ///
    /// A message already waiting completes the receive inside the call
    /// (UCX's fast path), reported as [`Received::Done`] with its tag.
    /// UCX before 1.16 does not fill `recv_info` then (its sender tag
    /// stays 0: the immediate and the sender lost), and 1.16 and later do
    /// not fill it for a message too long for the buffer (seen on 1.22).
    /// So where the tag is needed whatever happens (`full_tag`: a wildcard
    /// receive that must name its sender) or the UCX is older, the waiting
    /// message is probed first (`ucp_tag_probe_nb`, which reports its tag)
    /// and received by handle (`ucp_tag_msg_recv_nbx`); with none waiting,
    /// nothing can arrive before the receive is queued (no progress runs
    /// in the call), and it is asked not to complete in the call. On the
    /// fast path a truncated message reports the bits the receive matched
    /// (`tag & mask`).
    ///
    /// # Safety
    /// The worker's contract (see [`Worker`]); the buffers `layout` names
    /// (and its iovec) stay valid until the receive completes or is
    /// cancelled.
    #[inline]
    pub(crate) unsafe fn tag_recv(
        self,
        layout: Layout,
        tag: u64,
        mask: u64,
        token: u64,
        full_tag: bool,
    ) -> Received {
        let mut info = ffi::ucp_tag_recv_info_t::default();
        let mut param = ffi::ucp_request_param_t {
            op_attr_mask: ffi::UCP_OP_ATTR_FIELD_CALLBACK
                | ffi::UCP_OP_ATTR_FIELD_USER_DATA
                | ffi::UCP_OP_ATTR_FIELD_DATATYPE,
            user_data: user_data(token),
            datatype: layout.datatype,
            ..Default::default()
        };
        param.cb.recv = Some(events::recv_done);
        let fast = fills_info_when_immediate() && !full_tag;
        let r = if fast {
            param.op_attr_mask |= ffi::UCP_OP_ATTR_FIELD_RECV_INFO;
            param.recv_info.tag_info = &mut info;
            // SAFETY: live worker, used by one thread at a time, and
            // buffers valid until the receive ends (the caller's
            // contract); `info` outlives the call, the only time UCX
            // writes it.
            unsafe {
                ffi::ucp_tag_recv_nbx(self.raw(), layout.buf, layout.count, tag, mask, &param)
            }
        } else {
            // SAFETY: live worker (the caller's contract); `info` is a
            // valid out-pointer; the message, if any, is taken off the
            // unexpected queue for the receive below.
            let msg = unsafe { ffi::ucp_tag_probe_nb(self.raw(), tag, mask, 1, &mut info) };
            if msg.is_null() {
                param.op_attr_mask |= ffi::UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
                // SAFETY: as for the receive above.
                unsafe {
                    ffi::ucp_tag_recv_nbx(self.raw(), layout.buf, layout.count, tag, mask, &param)
                }
            } else {
                // SAFETY: as above; `msg` was just probed and removed, and
                // is received exactly once, here.
                unsafe {
                    ffi::ucp_tag_msg_recv_nbx(self.raw(), layout.buf, layout.count, msg, &param)
                }
            }
        };
        match started(r) {
            Started::Done => Received::Done {
                status: Status::OK,
                len: info.length,
                tag: info.sender_tag,
            },
            // A message too long for the buffer ended in the call too, and
            // its tag is known (the pool's receive names its sender).
            Started::Failed(s) if s == Status::MESSAGE_TRUNCATED => Received::Done {
                status: s,
                len: info.length,
                tag: if fast { tag & mask } else { info.sender_tag },
            },
            Started::Pending(req) => Received::Pending(req),
            Started::Failed(s) => Received::Failed(s),
        }
    }
}

/// Whether this UCX fills `recv_info` when a receive completes inside the
/// call (1.16 and later: "UCP/TAG: Populate tag_info on immediate
/// completion").
pub(crate) fn fills_info_when_immediate() -> bool {
    static FILLS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FILLS.get_or_init(|| super::context::version() >= (1, 16, 0))
}

#[cfg(test)]
mod tests {
    use ferrovia_types::Sge;

    use super::super::datatype::layout;
    use super::super::{Context, Ep, Worker};
    use super::*;

    /// Sends `bytes` tagged `tag` from `ep` and progresses `worker` until
    /// it waits in the unexpected queue.
    fn send_and_settle(worker: Worker, ep: Ep, bytes: &[u8], tag: u64) {
        let sge = [Sge::new(bytes.as_ptr() as u64, bytes.len() as u32, 0)];
        let mut iov = None;
        // SAFETY: live endpoint and worker, used by this thread only;
        // `bytes` outlives the send, which completes in the progress below.
        let started = unsafe { ep.tag_send(layout(&sge, &mut iov), tag, 1) };
        assert!(!matches!(started, Started::Failed(_)));
        for _ in 0..1000 {
            // SAFETY: as above.
            unsafe { worker.progress() };
        }
        let mut seen = Vec::new();
        events::take(&mut seen);
    }

    /// UCX before 1.16 loses the length and sender's tag of a receive that completes
    /// inside `ucp_tag_recv_nbx` (the quirk `tag_recv` works around), and
    /// `tag_recv` gets it on every version: with the immediate, the
    /// sender and the generation in the tag.
    #[test]
    fn a_receive_of_a_waiting_message_has_its_tag_on_this_ucx() {
        let ctx = Context::new(&[("TLS", "sm,self")]).expect("ucp_init over shared memory");
        let worker = Worker::create(&ctx).expect("a worker");
        // SAFETY: the worker is live and this thread's alone, as are the
        // endpoint and the buffers below until the worker is destroyed.
        let ep = unsafe { Ep::create(worker, &worker.address().unwrap(), None) }.unwrap();
        let tag = crate::tag::send_tag(5, 3, Some(0xdead_beef), false);

        // The quirk, with UCX's plain immediate completion.
        send_and_settle(worker, ep, b"first", tag);
        let mut into = [0u8; 16];
        let mut info = ffi::ucp_tag_recv_info_t::default();
        let mut param = ffi::ucp_request_param_t {
            op_attr_mask: ffi::UCP_OP_ATTR_FIELD_RECV_INFO,
            ..Default::default()
        };
        param.recv_info.tag_info = &mut info;
        // SAFETY: as above; `into` and `info` outlive the call, which
        // completes at once (the message waits).
        let r = unsafe {
            ffi::ucp_tag_recv_nbx(worker.raw(), into.as_mut_ptr().cast(), 16, tag, !0, &param)
        };
        assert!(matches!(started(r), Started::Done), "completed in the call");
        assert_eq!(&into[..5], b"first");
        // 1.13 leaves all of `recv_info` unwritten (length 0, tag 0).
        assert_eq!(
            info.sender_tag == tag && info.length == 5,
            fills_info_when_immediate(),
            "UCX {:?} fills recv_info on immediate completion: {}",
            super::super::context::version(),
            fills_info_when_immediate()
        );

        // The wrapper: the tag is there, for a peer's receive and for the
        // pool's.
        for (want, mask) in [crate::tag::recv_match(5, 3), crate::tag::recv_match_any()] {
            send_and_settle(worker, ep, b"second", tag);
            let sge = [Sge::new(into.as_mut_ptr() as u64, 16, 0)];
            let mut iov = None;
            // SAFETY: as above.
            let got = unsafe { worker.tag_recv(layout(&sge, &mut iov), want, mask, 2, mask != !0) };
            let Received::Done {
                status,
                len,
                tag: got,
            } = got
            else {
                panic!("the waiting message completes the receive in the call");
            };
            assert!(status == Status::OK && len == 6 && &into[..6] == b"second");
            assert_eq!(got, tag);
            assert_eq!(crate::tag::imm_of(got), Some(0xdead_beef));
            assert_eq!(crate::tag::sender_of(got), 5);
        }

        // Too long for the buffer: truncated, and its sender still known,
        // for a peer's receive (the bits it matched) and for the pool's
        // (probed first, so the whole tag).
        for (want, mask, full) in [
            (tag, !0, false),
            (
                crate::tag::recv_match(5, 3).0,
                crate::tag::recv_match(5, 3).1,
                false,
            ),
            (
                crate::tag::recv_match_any().0,
                crate::tag::recv_match_any().1,
                true,
            ),
        ] {
            send_and_settle(worker, ep, &[9; 64], tag);
            let sge = [Sge::new(into.as_mut_ptr() as u64, 16, 0)];
            let mut iov = None;
            // SAFETY: as above.
            let got = unsafe { worker.tag_recv(layout(&sge, &mut iov), want, mask, 3, full) };
            let Received::Done {
                status, tag: got, ..
            } = got
            else {
                panic!("a truncated receive ends in the call");
            };
            assert!(status == Status::MESSAGE_TRUNCATED);
            assert_eq!(crate::tag::sender_of(got), 5, "mask {mask:#x}");
            if full || mask == !0 {
                assert_eq!(got, tag);
            }
        }

        // SAFETY: nothing is outstanding; closed and destroyed once.
        unsafe {
            let _ = ep.close(true, 4);
            for _ in 0..100 {
                worker.progress();
            }
            worker.destroy();
        }
        let mut seen = Vec::new();
        events::take(&mut seen);
    }
}
