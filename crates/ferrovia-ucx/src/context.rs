//! The public UCX context ([`UcxContext`]): `ucp::Context`, shared by the
//! progress thread's worker and by memory registration, so it lives
//! behind an `Arc`, and the confinements it is made with.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::error::UcxError;
use crate::exposure::Exposure;
use crate::ucp;

/// An initialised UCX context with tag matching, RMA, active messages and
/// wakeup enabled. Cloning shares it.
#[derive(Clone)]
pub struct UcxContext {
    pub(crate) handle: Arc<ucp::Context>,
}

impl std::fmt::Debug for UcxContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UcxContext").finish_non_exhaustive()
    }
}

/// The version of the UCX this program runs on (`ucp_get_version`):
/// the system's, or 1.22.0 with the `vendored` feature.
pub fn ucx_version() -> (u32, u32, u32) {
    ucp::version()
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
        Ok(UcxContext {
            handle: Arc::new(ucp::Context::new(options)?),
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
            tracing::debug!("ucx: confined to {exposure:?}: {confine:?}");
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
