//! The request parameters and inline outcomes every `*_nbx` call of the
//! engine shares: a completion callback that reports the request's token
//! as an event, and the event of a call that finished inside the call.

use super::token::user_data;
use crate::events::{self, Event};
use crate::ffi;
use crate::status::{Started, started};

/// Parameters of a send, put, get, flush or close whose completion
/// callback reports `token`.
pub(crate) fn send_param(token: u64) -> ffi::ucp_request_param_t {
    let mut p = ffi::ucp_request_param_t {
        op_attr_mask: ffi::UCP_OP_ATTR_FIELD_CALLBACK | ffi::UCP_OP_ATTR_FIELD_USER_DATA,
        user_data: user_data(token),
        ..Default::default()
    };
    p.cb.send = Some(events::send_done);
    p
}

/// Records the outcome of an `*_nbx` call that completed or failed inside
/// the call (no callback runs for those).
pub(crate) fn record(token: u64, r: ffi::ucs_status_ptr_t) -> Started {
    let s = started(r);
    match s {
        Started::Done => events::push(Event::new(token, ffi::UCS_OK)),
        Started::Failed(st) => events::push(Event::new(token, st)),
        Started::Pending(_) => {}
    }
    s
}
