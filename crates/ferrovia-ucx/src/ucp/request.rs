//! Requests: the handle UCX returns for an operation in flight
//! ([`Request`]), the parameters every `*_nbx` call of this crate shares
//! (a completion callback that reports the operation's token as an
//! event), and cancellation.

use std::ffi::c_void;
use std::ptr::NonNull;

use super::events;
use super::ffi;
use super::worker::Worker;

/// An operation UCX holds (a `ucs_status_ptr_t` that is a pointer): its
/// callback reports its end and frees it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Request(pub(super) NonNull<c_void>);

/// What a request's `user_data` carries: the operation's token.
#[inline]
pub(super) fn user_data(token: u64) -> *mut c_void {
    token as usize as *mut c_void
}

/// Parameters of a send, put, get, flush or close whose completion
/// callback reports `token`.
#[inline]
pub(super) fn send_param(token: u64) -> ffi::ucp_request_param_t {
    let mut p = ffi::ucp_request_param_t {
        op_attr_mask: ffi::UCP_OP_ATTR_FIELD_CALLBACK | ffi::UCP_OP_ATTR_FIELD_USER_DATA,
        user_data: user_data(token),
        ..Default::default()
    };
    p.cb.send = Some(events::send_done);
    p
}

impl Worker {
    /// `ucp_request_cancel`: its callback reports the cancellation.
    ///
    /// # Safety
    /// The worker's contract (see [`Worker`]), and `request` is a request
    /// of this worker UCX still holds (its callback has not run), cancelled
    /// once.
    #[inline]
    pub(crate) unsafe fn cancel(self, request: Request) {
        // SAFETY: the caller's contract: a live request of this live
        // worker, used by one thread at a time.
        unsafe { ffi::ucp_request_cancel(self.raw(), request.0.as_ptr()) };
    }
}
