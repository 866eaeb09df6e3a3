//! The UCX (ucp) calls, and the only module tree that names them: the
//! bindings (`ffi`, private here) and thin wrappers over them, one concept
//! a file, with small handle types, so nothing of `ffi` leaks out. The
//! engine, the receives, the registrar and the rest of the crate call the
//! wrappers.
//!
//! - `status`: UCX statuses ([`Status`]), what an `*_nbx` call returned
//!   ([`Started`]), and how a status reads as a verbs completion status
//!   and as a [`UcxError`](crate::UcxError).
//! - `context`: the UCX context ([`Context`]).
//! - `worker`: the worker ([`Worker`]): progress, arming, its event fd and
//!   address; [`WorkerSlot`] wakes it from any thread.
//! - `endpoint`: endpoints ([`Ep`]) from a worker address, with or without
//!   peer error handling; flush and close.
//! - `memory`: registrations ([`MemMap`]) and remote keys ([`Rkey`]).
//! - `datatype`: how a list of buffers is described to UCX ([`Layout`],
//!   [`Iov`]).
//! - `rma`: puts, gets and atomics; `tag`: tagged sends and receives;
//!   `am`: control messages (active messages); `request`: the request
//!   handle ([`Request`]), parameters and cancellation.
//! - `events`: the C callbacks, and the thread-local list of what they
//!   report ([`events::Event`]).
//!
//! Wrappers whose contract the types check are safe; those that depend on
//! what the caller promises (a handle not yet destroyed, the worker used
//! by one thread at a time, a buffer that outlives its request) are
//! `unsafe fn`, and each caller argues its case. They are `#[inline]`:
//! the send pipeline and the receives post through them.

mod am;
mod context;
mod datatype;
mod endpoint;
pub(crate) mod events;
mod ffi;
mod memory;
mod request;
mod rma;
mod status;
mod tag;
mod worker;

pub(crate) use context::{Context, version};
pub(crate) use datatype::{Iov, layout};
pub(crate) use endpoint::Ep;
pub(crate) use memory::{MemMap, Rkey};
pub(crate) use request::Request;
pub(crate) use rma::Atomic;
pub(crate) use status::{
    REMOTE_ACCESS, Started, Status, addr_error, status_error, vendor_err, wc_status,
};
pub(crate) use tag::Received;
pub(crate) use worker::{Worker, WorkerSlot};

/// The handle a UCX call returned with `UCS_OK` (never NULL then).
#[inline]
fn handle<T>(raw: *mut T, op: &'static str) -> std::ptr::NonNull<T> {
    std::ptr::NonNull::new(raw).unwrap_or_else(|| panic!("{op} returned UCS_OK and no handle"))
}
