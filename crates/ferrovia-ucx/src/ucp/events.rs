//! The C callbacks UCX calls on the thread that progresses the worker,
//! private to `crate::ucp` (the wrappers install them). Each one only
//! records an [`Event`] in a thread-local list (the engine acts on it after
//! `ucp_worker_progress` returns, so no callback re-enters the engine), and
//! runs inside `catch_unwind`: a panic never unwinds into C.

use std::cell::RefCell;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::ffi;
use super::status::Status;

/// Something UCX reported.
#[derive(Debug)]
pub(crate) struct Event {
    /// Which operation (see `engine::Token`).
    pub(crate) token: u64,
    pub(crate) status: Status,
    /// Received length (receives).
    pub(crate) len: usize,
    /// Sender tag (receives).
    pub(crate) tag: u64,
    /// A control message's bytes.
    pub(crate) data: Option<Box<[u8]>>,
}

impl Event {
    pub(crate) fn new(token: u64, status: Status) -> Event {
        Event {
            token,
            status,
            len: 0,
            tag: 0,
            data: None,
        }
    }
}

thread_local! {
    static EVENTS: RefCell<Vec<Event>> = const { RefCell::new(Vec::new()) };
}

/// Records an event for the engine of this thread.
pub(crate) fn push(ev: Event) {
    let _ = EVENTS.try_with(|e| {
        if let Ok(mut v) = e.try_borrow_mut() {
            v.push(ev);
        }
    });
}

/// Whether events wait in this thread's list.
pub(crate) fn pending() -> bool {
    EVENTS
        .try_with(|e| e.try_borrow().is_ok_and(|v| !v.is_empty()))
        .unwrap_or(false)
}

/// Moves the recorded events into `into` (which must be empty).
pub(crate) fn take(into: &mut Vec<Event>) {
    let _ = EVENTS.try_with(|e| {
        if let Ok(mut v) = e.try_borrow_mut() {
            std::mem::swap(&mut *v, into);
        }
    });
}

/// Completion of a send, put, get, flush or close.
///
/// # Safety
/// Only UCX calls it, as the `cb.send` of a request the engine issued with
/// `UCP_OP_ATTR_FIELD_REQUEST` unset (UCX allocated `request`) and with
/// `user_data` set to the operation's token: `request` is that live,
/// completed request, which nobody else frees (the engine forgets a
/// request once it has handed it to UCX with this callback).
pub(super) unsafe extern "C" fn send_done(
    request: *mut c_void,
    status: ffi::ucs_status_t,
    user_data: *mut c_void,
) {
    let _ = catch_unwind(|| push(Event::new(user_data as u64, Status(status))));
    // SAFETY: by this function's contract `request` is a live request UCX
    // allocated and reports complete; this is the one place that frees it,
    // and the engine drops its copy of the pointer when the event is
    // handled, never dereferencing it again.
    unsafe { ffi::ucp_request_free(request) };
}

/// Completion of a tagged receive.
///
/// # Safety
/// Only UCX calls it, as the `cb.recv` of a receive the engine posted with
/// its token as `user_data`: `request` is that live, completed (or
/// cancelled) request, freed only here, and `info` is NULL or points to a
/// `ucp_tag_recv_info_t` valid for the call.
pub(super) unsafe extern "C" fn recv_done(
    request: *mut c_void,
    status: ffi::ucs_status_t,
    info: *const ffi::ucp_tag_recv_info_t,
    user_data: *mut c_void,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let mut ev = Event::new(user_data as u64, Status(status));
        // SAFETY: by this function's contract `info` is NULL (checked by
        // `as_ref`, as UCX passes for a cancelled request) or valid for
        // reads for the duration of the call; only its fields are copied.
        if let Some(info) = unsafe { info.as_ref() } {
            ev.len = info.length;
            ev.tag = info.sender_tag;
        }
        push(ev);
    }));
    // SAFETY: `request` is a live request UCX allocated and reports done
    // (this function's contract), freed only here, and the engine never
    // dereferences its copy after the event.
    unsafe { ffi::ucp_request_free(request) };
}

/// An endpoint failed (the peer died or became unreachable); `arg` is
/// the token its error names (see `Ep::create`).
///
/// # Safety
/// Only UCX calls it, as the error handler of an endpoint created with a
/// token (not a pointer) as `arg`; it dereferences nothing, so any
/// arguments UCX passes are fine.
pub(super) unsafe extern "C" fn endpoint_failed(
    arg: *mut c_void,
    _ep: ffi::ucp_ep_h,
    status: ffi::ucs_status_t,
) {
    let _ = catch_unwind(|| push(Event::new(arg as u64, Status(status))));
}

/// A control message arrived (sent eager, so its bytes are all here).
///
/// # Safety
/// Only UCX calls it, as the active-message handler registered for
/// `control::AM_ID` with the token of a control message as `arg` (see
/// `Worker::set_control_handler`): `header` is NULL or points to `header_length`
/// readable bytes for the duration of the call. The data part is not
/// touched (returning `UCS_OK` tells UCX it may release it).
pub(super) unsafe extern "C" fn control_received(
    arg: *mut c_void,
    header: *const c_void,
    header_length: usize,
    _data: *mut c_void,
    _length: usize,
    _param: *const ffi::ucp_am_recv_param_t,
) -> ffi::ucs_status_t {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let bytes: Box<[u8]> = if header.is_null() || header_length == 0 {
            Box::new([])
        } else {
            // SAFETY: `header` is non-null (checked) and, by this function's
            // contract, points to `header_length` bytes readable for the
            // call; they are copied out before it returns.
            unsafe { std::slice::from_raw_parts(header.cast::<u8>(), header_length) }.into()
        };
        let mut ev = Event::new(arg as u64, Status::OK);
        ev.data = Some(bytes);
        push(ev);
    }));
    // The data (none is sent) is not kept.
    ffi::UCS_OK
}
