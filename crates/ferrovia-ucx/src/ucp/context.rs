//! The UCX context (`ucp_context_h`): read from the environment,
//! configured, initialised with the features this crate uses, cleaned up
//! when its last user drops it.

use std::ffi::CString;
use std::ptr::{null, null_mut};

use super::ffi;
use super::status::{Status, check};
use crate::error::UcxError;

/// An initialised UCX context with tag matching, RMA, active messages,
/// 64-bit atomics and wakeup enabled, and `mt_workers_shared`. Dropping it
/// cleans it up: whatever lives on it (workers, memory maps) holds an
/// `Arc` of it.
pub(crate) struct Context {
    raw: ffi::ucp_context_h,
}

// SAFETY: the context is created with `mt_workers_shared`, so UCX guards
// its shared state (memory maps) with its own lock; after creation it is
// otherwise only read.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every worker and memory map holds an `Arc` of this handle,
        // so none is left when the last one drops.
        unsafe { ffi::ucp_cleanup(self.raw) };
    }
}

impl Context {
    /// Reads the UCX configuration from the environment (`UCX_TLS`, ...),
    /// overrides the entries of `options` (names without the `UCX_`
    /// prefix) and initialises a context.
    pub(crate) fn new(options: &[(&str, &str)]) -> Result<Context, UcxError> {
        let mut config = null_mut();
        // SAFETY: NULL prefix and file mean "environment only"; `config`
        // is a valid out-pointer.
        let status = Status(unsafe { ffi::ucp_config_read(null(), null(), &mut config) });
        check("ucp_config_read", status)?;
        let applied = apply(config, options);
        let raw = applied.and_then(|()| init(config));
        // SAFETY: read above, released once; init copied what it needs.
        unsafe { ffi::ucp_config_release(config) };
        Ok(Context { raw: raw? })
    }

    #[inline]
    pub(super) fn raw(&self) -> ffi::ucp_context_h {
        self.raw
    }
}

fn apply(config: *mut ffi::ucp_config_t, options: &[(&str, &str)]) -> Result<(), UcxError> {
    for (name, value) in options {
        let (Ok(n), Ok(v)) = (CString::new(*name), CString::new(*value)) else {
            return Err(UcxError::InvalidOption {
                name: name.to_string(),
            });
        };
        // SAFETY: valid config and NUL-terminated strings.
        let status = Status(unsafe { ffi::ucp_config_modify(config, n.as_ptr(), v.as_ptr()) });
        check("ucp_config_modify", status)?;
    }
    Ok(())
}

fn init(config: *const ffi::ucp_config_t) -> Result<ffi::ucp_context_h, UcxError> {
    let params = ffi::ucp_params_t {
        field_mask: u64::from(
            ffi::UCP_PARAM_FIELD_FEATURES | ffi::UCP_PARAM_FIELD_MT_WORKERS_SHARED,
        ),
        features: u64::from(
            ffi::UCP_FEATURE_TAG
                | ffi::UCP_FEATURE_RMA
                | ffi::UCP_FEATURE_AM
                | ffi::UCP_FEATURE_AMO64
                | ffi::UCP_FEATURE_WAKEUP,
        ),
        // Registration runs on user threads while the progress thread
        // owns the worker.
        mt_workers_shared: 1,
        ..Default::default()
    };
    let mut ctx = null_mut();
    // SAFETY: ucp_init is a static inline over ucp_init_version with the
    // header's API version, which is what this passes.
    let status = Status(unsafe {
        ffi::ucp_init_version(
            ffi::UCP_API_MAJOR,
            ffi::UCP_API_MINOR,
            &params,
            config,
            &mut ctx,
        )
    });
    check("ucp_init", status)?;
    Ok(ctx)
}

/// The version of the UCX library this process runs on
/// (`ucp_get_version`): major, minor, release.
pub(crate) fn version() -> (u32, u32, u32) {
    let (mut major, mut minor, mut release) = (0, 0, 0);
    // SAFETY: three valid out-pointers; UCX only writes them.
    unsafe { ffi::ucp_get_version(&mut major, &mut minor, &mut release) };
    (major, minor, release)
}
