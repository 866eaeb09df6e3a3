//! Endpoints ([`Ep`]): created from a peer's worker address, with or
//! without peer error handling; flushed and closed.

use std::ptr::{NonNull, null_mut};

use super::ffi;
use super::request::{send_param, user_data};
use super::status::{Started, Status, started};
use super::worker::Worker;
use super::{events, handle};

/// A `ucp_ep_h`, copied freely; it names the endpoint, it does not own
/// it. Its `unsafe` methods ask the contract of its worker (see
/// [`Worker`]), and that the endpoint is live: created on that worker and
/// not yet closed.
#[derive(Clone, Copy)]
pub(crate) struct Ep(NonNull<ffi::ucp_ep>);

impl Ep {
    #[inline]
    pub(super) fn raw(self) -> ffi::ucp_ep_h {
        self.0.as_ptr()
    }

    /// `ucp_ep_create` on `worker` to the worker whose address is
    /// `address`. With `on_failure`, the endpoint uses peer error handling
    /// and its failure is reported as an event of that token.
    ///
    /// # Safety
    /// The worker's contract (see [`Worker`]).
    pub(crate) unsafe fn create(
        worker: Worker,
        address: &[u8],
        on_failure: Option<u64>,
    ) -> Result<Ep, Status> {
        let mut params = ffi::ucp_ep_params_t {
            field_mask: u64::from(ffi::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS),
            address: address.as_ptr().cast(),
            ..Default::default()
        };
        if let Some(token) = on_failure {
            params.field_mask |= u64::from(
                ffi::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | ffi::UCP_EP_PARAM_FIELD_ERR_HANDLER,
            );
            params.err_mode = ffi::UCP_ERR_HANDLING_MODE_PEER;
            params.err_handler.cb = Some(events::endpoint_failed);
            params.err_handler.arg = user_data(token);
        }
        let mut ep = null_mut();
        // SAFETY: valid worker (the caller's contract), params and
        // out-pointer; UCX copies the address during the call.
        let status = Status(unsafe { ffi::ucp_ep_create(worker.raw(), &params, &mut ep) });
        if status == Status::OK {
            Ok(Ep(handle(ep, "ucp_ep_create")))
        } else {
            Err(status)
        }
    }

    /// A handle for tests that never call UCX with it.
    #[cfg(test)]
    pub(crate) fn dangling() -> Ep {
        Ep(NonNull::dangling())
    }

    /// `ucp_ep_flush_nbx`: completes, at both ends, every operation issued
    /// on the endpoint before it; the completion callback reports `token`.
    ///
    /// # Safety
    /// See [`Ep`].
    #[inline]
    pub(crate) unsafe fn flush(self, token: u64) -> Started {
        let param = send_param(token);
        // SAFETY: live endpoint, used by one thread at a time (the
        // caller's contract).
        started(unsafe { ffi::ucp_ep_flush_nbx(self.raw(), &param) })
    }

    /// `ucp_ep_close_nbx`, forced (`UCP_EP_CLOSE_FLAG_FORCE`: what is in
    /// flight is cancelled) or graceful; the completion callback reports
    /// `token`.
    ///
    /// # Safety
    /// See [`Ep`]; it is closed once, and not used afterwards.
    pub(crate) unsafe fn close(self, force: bool, token: u64) -> Started {
        let mut param = send_param(token);
        param.op_attr_mask |= ffi::UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = if force {
            ffi::UCP_EP_CLOSE_FLAG_FORCE
        } else {
            0
        };
        // SAFETY: an endpoint of a live worker, closed once (the caller's
        // contract).
        started(unsafe { ffi::ucp_ep_close_nbx(self.raw(), &param) })
    }
}
