//! The UCX worker ([`Worker`]): creation (SERIALIZED), its address, its
//! event fd, progress and arming, destruction; and [`WorkerSlot`], which
//! wakes it from any thread.

use std::ptr::{NonNull, null_mut};
use std::sync::atomic::AtomicPtr;
use std::sync::atomic::Ordering::SeqCst;

use super::context::Context;
use super::ffi;
use super::status::{Status, check};
use crate::error::UcxError;

/// A `ucp_worker_h`, copied freely; it names the worker, it does not own
/// it.
///
/// The worker's contract, which the `unsafe` methods of this type (and of
/// the endpoints and requests on it) ask of their callers: the worker is
/// live (created and not yet destroyed, its context alive), and no other
/// thread calls into it at the same time (it is created SERIALIZED).
#[derive(Clone, Copy)]
pub(crate) struct Worker(NonNull<ffi::ucp_worker>);

impl Worker {
    /// `ucp_worker_create` on `ctx`, SERIALIZED: whoever holds its owner's
    /// lock may call into it. It must be destroyed before `ctx` drops.
    pub(crate) fn create(ctx: &Context) -> Result<Worker, UcxError> {
        let params = ffi::ucp_worker_params_t {
            field_mask: u64::from(ffi::UCP_WORKER_PARAM_FIELD_THREAD_MODE),
            // The progress thread and polling user threads take turns under
            // the engine's lock.
            thread_mode: ffi::UCS_THREAD_MODE_SERIALIZED,
            ..Default::default()
        };
        let mut worker = null_mut();
        // SAFETY: valid context, params and out-pointer.
        let status = Status(unsafe { ffi::ucp_worker_create(ctx.raw(), &params, &mut worker) });
        check("ucp_worker_create", status)?;
        Ok(Worker(super::handle(worker, "ucp_worker_create")))
    }

    #[inline]
    pub(super) fn raw(self) -> ffi::ucp_worker_h {
        self.0.as_ptr()
    }

    /// The worker's address (`ucp_worker_get_address`), copied.
    ///
    /// # Safety
    /// The worker's contract (see [`Worker`]).
    pub(crate) unsafe fn address(self) -> Result<Vec<u8>, UcxError> {
        let mut addr = null_mut();
        let mut len = 0usize;
        // SAFETY: valid worker (the caller's contract) and out-pointers.
        let status =
            Status(unsafe { ffi::ucp_worker_get_address(self.raw(), &mut addr, &mut len) });
        check("ucp_worker_get_address", status)?;
        // SAFETY: UCX returned `len` readable bytes at `addr`.
        let bytes = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len) }.to_vec();
        // SAFETY: released once, after copying.
        unsafe { ffi::ucp_worker_release_address(self.raw(), addr) };
        Ok(bytes)
    }

    /// The worker's event fd (`ucp_worker_get_efd`).
    ///
    /// # Safety
    /// The worker's contract (see [`Worker`]); its context has the WAKEUP
    /// feature.
    pub(crate) unsafe fn efd(self) -> Result<i32, UcxError> {
        let mut efd = -1;
        // SAFETY: valid worker (created with the WAKEUP feature: the
        // caller's contract) and out-pointer.
        let status = Status(unsafe { ffi::ucp_worker_get_efd(self.raw(), &mut efd) });
        check("ucp_worker_get_efd", status)?;
        Ok(efd)
    }

    /// `ucp_worker_progress`: how many events it handled (UCX's callbacks
    /// ran meanwhile, on this thread).
    ///
    /// # Safety
    /// The worker's contract (see [`Worker`]).
    #[inline]
    pub(crate) unsafe fn progress(self) -> u32 {
        // SAFETY: the caller's contract.
        unsafe { ffi::ucp_worker_progress(self.raw()) }
    }

    /// `ucp_worker_arm`: whether the event fd is armed (`UCS_OK`; busy
    /// otherwise: progress first).
    ///
    /// # Safety
    /// The worker's contract (see [`Worker`]).
    #[inline]
    pub(crate) unsafe fn arm(self) -> Status {
        // SAFETY: the caller's contract.
        Status(unsafe { ffi::ucp_worker_arm(self.raw()) })
    }

    /// `ucp_worker_destroy`.
    ///
    /// # Safety
    /// The worker's contract (see [`Worker`]); nothing uses it afterwards,
    /// and it is destroyed once.
    pub(crate) unsafe fn destroy(self) {
        // SAFETY: the caller's contract.
        unsafe { ffi::ucp_worker_destroy(self.raw()) };
    }
}

/// Where a worker is published for threads that wake it
/// (`ucp_worker_signal`, which any thread may call).
pub(crate) struct WorkerSlot(AtomicPtr<ffi::ucp_worker>);

impl WorkerSlot {
    /// Empty.
    pub(crate) fn new() -> WorkerSlot {
        WorkerSlot(AtomicPtr::new(null_mut()))
    }

    /// Publishes `worker` (`None`: takes it out).
    pub(crate) fn set(&self, worker: Option<Worker>) {
        self.0.store(worker.map_or(null_mut(), Worker::raw), SeqCst);
    }

    /// Signals the published worker, if any (its `ucp_worker_arm` wait
    /// ends).
    ///
    /// # Safety
    /// A worker published here is live until it is taken out, and it is
    /// not taken out and destroyed while this call runs.
    pub(crate) unsafe fn signal(&self) {
        let w = self.0.load(SeqCst);
        if !w.is_null() {
            // SAFETY: a live worker (the caller's contract);
            // ucp_worker_signal may be called from any thread.
            unsafe { ffi::ucp_worker_signal(w) };
        }
    }
}
