//! A UCX context and worker: the FFI groundwork of the transport, what
//! the progress thread of the full backend will own.

use std::marker::PhantomData;
use std::ptr::{null, null_mut};

use crate::error::{UcxError, check};
use crate::ffi;

/// A UCX context (`ucp_context_h`) with tag matching enabled.
pub struct UcxContext {
    ctx: ffi::ucp_context_h,
}

// SAFETY: a ucp context may be used from any thread (it is only read by
// workers after creation; UCX documents it as thread-safe for that).
unsafe impl Send for UcxContext {}
// SAFETY: as above.
unsafe impl Sync for UcxContext {}

impl UcxContext {
    /// Reads the UCX configuration from the environment (`UCX_TLS`, ...)
    /// and initialises a context.
    pub fn new() -> Result<UcxContext, UcxError> {
        Self::with_options(&[])
    }

    /// Like [`UcxContext::new`], then overrides configuration entries,
    /// e.g. `[("TLS", "tcp")]` (the names of `UCX_*` variables without the
    /// prefix).
    pub fn with_options(options: &[(&str, &str)]) -> Result<UcxContext, UcxError> {
        let mut config = null_mut();
        // SAFETY: NULL prefix and file mean "environment only"; `config`
        // is a valid out-pointer.
        check("ucp_config_read", unsafe {
            ffi::ucp_config_read(null(), null(), &mut config)
        })?;
        for (name, value) in options {
            let (Ok(n), Ok(v)) = (
                std::ffi::CString::new(*name),
                std::ffi::CString::new(*value),
            ) else {
                // SAFETY: read above, released once.
                unsafe { ffi::ucp_config_release(config) };
                return Err(UcxError::InvalidOption {
                    name: name.to_string(),
                });
            };
            // SAFETY: valid config and NUL-terminated strings.
            let status = unsafe { ffi::ucp_config_modify(config, n.as_ptr(), v.as_ptr()) };
            if let Err(e) = check("ucp_config_modify", status) {
                // SAFETY: read above, released once.
                unsafe { ffi::ucp_config_release(config) };
                return Err(e);
            }
        }
        let params = ffi::ucp_params_t {
            field_mask: u64::from(ffi::UCP_PARAM_FIELD_FEATURES),
            features: u64::from(ffi::UCP_FEATURE_TAG),
            ..Default::default()
        };
        let mut ctx = null_mut();
        // SAFETY: ucp_init is a static inline over ucp_init_version with the
        // header's API version, which is what this passes.
        let status = unsafe {
            ffi::ucp_init_version(
                ffi::UCP_API_MAJOR,
                ffi::UCP_API_MINOR,
                &params,
                config,
                &mut ctx,
            )
        };
        // SAFETY: the config is no longer needed after init.
        unsafe { ffi::ucp_config_release(config) };
        check("ucp_init", status)?;
        Ok(UcxContext { ctx })
    }
}

impl Drop for UcxContext {
    fn drop(&mut self) {
        // SAFETY: workers borrow the context, so none is left.
        unsafe { ffi::ucp_cleanup(self.ctx) };
    }
}

/// A UCX worker (`ucp_worker_h`), single-threaded: it may move between
/// threads but is used by one at a time.
pub struct Worker<'c> {
    worker: ffi::ucp_worker_h,
    _ctx: PhantomData<&'c UcxContext>,
}

// SAFETY: a single-thread-mode worker may be handed to another thread as
// long as only one uses it at a time, which `&mut`/ownership ensures (it
// is not Sync).
unsafe impl Send for Worker<'_> {}

impl<'c> Worker<'c> {
    /// Creates a worker on `ctx`.
    pub fn new(ctx: &'c UcxContext) -> Result<Worker<'c>, UcxError> {
        let params = ffi::ucp_worker_params_t {
            field_mask: u64::from(ffi::UCP_WORKER_PARAM_FIELD_THREAD_MODE),
            thread_mode: ffi::UCS_THREAD_MODE_SINGLE,
            ..Default::default()
        };
        let mut worker = null_mut();
        // SAFETY: valid context, params and out-pointer.
        check("ucp_worker_create", unsafe {
            ffi::ucp_worker_create(ctx.ctx, &params, &mut worker)
        })?;
        Ok(Worker {
            worker,
            _ctx: PhantomData,
        })
    }

    /// The worker's address, for peers to connect to (travels through the
    /// `Node` bootstrap).
    pub fn address(&self) -> Result<Vec<u8>, UcxError> {
        let mut addr = null_mut();
        let mut len = 0usize;
        // SAFETY: valid worker and out-pointers.
        check("ucp_worker_get_address", unsafe {
            ffi::ucp_worker_get_address(self.worker, &mut addr, &mut len)
        })?;
        // SAFETY: UCX returned `len` readable bytes at `addr`.
        let bytes = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len) }.to_vec();
        // SAFETY: released once, after copying.
        unsafe { ffi::ucp_worker_release_address(self.worker, addr) };
        Ok(bytes)
    }

    /// Makes progress on every operation of the worker.
    pub fn progress(&self) -> u32 {
        // SAFETY: valid worker, used by this thread only.
        unsafe { ffi::ucp_worker_progress(self.worker) }
    }
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        // SAFETY: endpoints borrow the worker, so all are closed.
        unsafe { ffi::ucp_worker_destroy(self.worker) };
    }
}
