//! Control messages as UCX active messages: the handler that receives
//! them on a worker, and eager sends on an endpoint.

use super::endpoint::Ep;
use super::events;
use super::ffi;
use super::request::{send_param, user_data};
use super::status::{Started, Status, check, started};
use super::worker::Worker;
use crate::error::UcxError;

impl Worker {
    /// Registers the handler of active message `id`: each message that
    /// arrives is reported as an event of `token` with its header bytes
    /// (its data part is not kept).
    ///
    /// # Safety
    /// The worker's contract (see [`Worker`]).
    pub(crate) unsafe fn set_control_handler(self, id: u32, token: u64) -> Result<(), UcxError> {
        let am = ffi::ucp_am_handler_param_t {
            field_mask: u64::from(
                ffi::UCP_AM_HANDLER_PARAM_FIELD_ID
                    | ffi::UCP_AM_HANDLER_PARAM_FIELD_CB
                    | ffi::UCP_AM_HANDLER_PARAM_FIELD_ARG,
            ),
            id,
            cb: Some(events::control_received),
            arg: user_data(token),
            ..Default::default()
        };
        // SAFETY: valid worker (the caller's contract) and parameters; the
        // callback is a plain function that outlives the worker.
        let status = Status(unsafe { ffi::ucp_worker_set_am_recv_handler(self.raw(), &am) });
        check("ucp_worker_set_am_recv_handler", status)
    }
}

impl Ep {
    /// `ucp_am_send_nbx` of active message `id` with `header` as its
    /// header (no data part), eager; the completion callback reports
    /// `token`.
    ///
    /// # Safety
    /// See [`Ep`]; the `header` bytes stay where they are, unchanged,
    /// until the send completes.
    #[inline]
    pub(crate) unsafe fn am_send(self, id: u32, header: &[u8], token: u64) -> Started {
        let mut param = send_param(token);
        param.op_attr_mask |= ffi::UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = ffi::UCP_AM_SEND_FLAG_EAGER;
        // SAFETY: live endpoint and header bytes valid until completion
        // (the caller's contract).
        started(unsafe {
            ffi::ucp_am_send_nbx(
                self.raw(),
                id,
                header.as_ptr().cast(),
                header.len(),
                std::ptr::null_mut(),
                0,
                &param,
            )
        })
    }
}
