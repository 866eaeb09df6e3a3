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
    /// It took a message inside the call: its length and the sender's
    /// tag. No callback will run.
    Done { len: usize, tag: u64 },
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
    /// `token`, with the received length and the sender's tag. UCX is
    /// asked not to complete it inside the call (`NO_IMM_CMPL`), where it
    /// could lose the sender's tag.
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
    ) -> Received {
        let mut info = ffi::ucp_tag_recv_info_t::default();
        let mut param = ffi::ucp_request_param_t {
            op_attr_mask: ffi::UCP_OP_ATTR_FIELD_CALLBACK
                | ffi::UCP_OP_ATTR_FIELD_USER_DATA
                | ffi::UCP_OP_ATTR_FIELD_DATATYPE
                | ffi::UCP_OP_ATTR_FIELD_RECV_INFO
                // UCX 1.13 can complete a receive of an unexpected eager
                // message inside the call without filling `recv_info`
                // (sender tag 0: the immediate lost); the callback always
                // has it.
                | ffi::UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
            user_data: user_data(token),
            datatype: layout.datatype,
            ..Default::default()
        };
        param.cb.recv = Some(events::recv_done);
        param.recv_info.tag_info = &mut info;
        // SAFETY: live worker, used by one thread at a time, and buffers
        // valid until the receive ends (the caller's contract); `info`
        // outlives the call, the only time UCX writes it.
        let r = unsafe {
            ffi::ucp_tag_recv_nbx(self.raw(), layout.buf, layout.count, tag, mask, &param)
        };
        match started(r) {
            Started::Done => Received::Done {
                len: info.length,
                tag: info.sender_tag,
            },
            Started::Pending(req) => Received::Pending(req),
            Started::Failed(s) => Received::Failed(s),
        }
    }
}
