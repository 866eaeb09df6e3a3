//! The UCX context (`ucp_context_h`): shared by the progress thread's
//! worker and by memory registration, so it lives behind an `Arc`.

use std::ffi::CString;
use std::net::SocketAddr;
use std::ptr::{null, null_mut};
use std::sync::Arc;

use crate::error::{UcxError, check};
use crate::exposure::Exposure;
use crate::ffi;

/// An initialised UCX context with tag matching, RMA, active messages and
/// wakeup enabled. Cloning shares it.
#[derive(Clone)]
pub struct UcxContext {
    pub(crate) handle: Arc<ContextHandle>,
}

pub(crate) struct ContextHandle {
    pub(crate) raw: ffi::ucp_context_h,
}

// SAFETY: the context is created with `mt_workers_shared`, so UCX guards
// its shared state (memory maps) with its own lock; after creation it is
// otherwise only read.
unsafe impl Send for ContextHandle {}
// SAFETY: as above.
unsafe impl Sync for ContextHandle {}

impl Drop for ContextHandle {
    fn drop(&mut self) {
        // SAFETY: every worker and memory map holds an `Arc` of this handle,
        // so none is left when the last one drops.
        unsafe { ffi::ucp_cleanup(self.raw) };
    }
}

impl std::fmt::Debug for UcxContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UcxContext").finish_non_exhaustive()
    }
}

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
        let applied = apply(config, options);
        let raw = applied.and_then(|()| init(config));
        // SAFETY: read above, released once; init copied what it needs.
        unsafe { ffi::ucp_config_release(config) };
        Ok(UcxContext {
            handle: Arc::new(ContextHandle { raw: raw? }),
        })
    }
}

impl UcxContext {
    /// Like [`UcxContext::with_options`], confined to the networks
    /// `exposure` allows (see [`Exposure`]: a one-host job on shared
    /// memory, or UCX's network ports on loopback or on the interface
    /// toward the peers). `options` come after the confinement's, so they
    /// win.
    pub fn confined(exposure: Exposure, options: &[(&str, &str)]) -> Result<UcxContext, UcxError> {
        let confine = exposure.host_options();
        let mut all: Vec<(&str, &str)> = confine.iter().map(|(n, v)| (*n, v.as_str())).collect();
        if !confine.is_empty() {
            log::debug!("ucx: confined to {exposure:?}: {confine:?}");
        }
        all.extend_from_slice(options);
        UcxContext::with_options(&all)
    }

    /// A context for connections by address to or from `addr`: like
    /// [`UcxContext::confined`], and for an IPv6 address with the tcp
    /// transport's `AF_PRIO=inet6` unless `UCX_TCP_AF_PRIO` is set. UCX 1.13 opens
    /// its tcp data lanes on IPv4 first; a connection made over IPv6 then
    /// fails (and the failing server side corrupts the heap), so both
    /// sides of an IPv6 connection must open them on IPv6. (Over `::1` it
    /// is unreachable either way: use the host's own IPv6 address.)
    pub fn for_address(
        addr: SocketAddr,
        exposure: Exposure,
        options: &[(&str, &str)],
    ) -> Result<UcxContext, UcxError> {
        let mut all = options.to_vec();
        if addr.is_ipv6()
            && std::env::var_os("UCX_TCP_AF_PRIO").is_none()
            && !options
                .iter()
                .any(|(n, _)| *n == "AF_PRIO" || *n == "TCP_AF_PRIO")
        {
            all.push(("AF_PRIO", "inet6"));
        }
        UcxContext::confined(exposure, &all)
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
        check("ucp_config_modify", unsafe {
            ffi::ucp_config_modify(config, n.as_ptr(), v.as_ptr())
        })?;
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
    check("ucp_init", unsafe {
        ffi::ucp_init_version(
            ffi::UCP_API_MAJOR,
            ffi::UCP_API_MINOR,
            &params,
            config,
            &mut ctx,
        )
    })?;
    Ok(ctx)
}
