//! Loading libibverbs (and librdmacm) at run time, once per process.

use std::sync::OnceLock;

use crate::verbs_fns::Verbs;

/// The library [`verbs()`] loads, unless `FERROVIA_LIBIBVERBS` names
/// another path.
pub const LIBIBVERBS: &str = "libibverbs.so.1";

/// Why a library could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// The file asked for.
    pub library: String,
    /// What the loader said.
    pub reason: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot load {}: {} (install rdma-core's user-space library, e.g. `apt-get install libibverbs1`)",
            self.library, self.reason
        )
    }
}

impl std::error::Error for LoadError {}

fn path(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

static VERBS: OnceLock<Result<Verbs, LoadError>> = OnceLock::new();

/// libibverbs, loaded on first use (the same answer for the life of the
/// process). `FERROVIA_LIBIBVERBS` overrides the file name.
pub fn verbs() -> Result<&'static Verbs, LoadError> {
    VERBS
        .get_or_init(|| {
            let library = path("FERROVIA_LIBIBVERBS", LIBIBVERBS);
            // SAFETY: loading runs libibverbs' initialisers, which only set
            // up its provider table; every symbol is then resolved against
            // the prototypes bindgen generated from the installed headers of
            // the same library (rdma-core keeps them ABI-stable, with
            // versioned symbols for the old layouts).
            unsafe { Verbs::new(&library) }.map_err(|e| LoadError {
                library,
                reason: e.to_string(),
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The library [`rdmacm()`] loads, unless `FERROVIA_LIBRDMACM` names
/// another path.
#[cfg(feature = "rdmacm")]
pub const LIBRDMACM: &str = "librdmacm.so.1";

#[cfg(feature = "rdmacm")]
static RDMACM: OnceLock<Result<crate::RdmaCm, LoadError>> = OnceLock::new();

/// librdmacm, loaded on first use. `FERROVIA_LIBRDMACM` overrides the
/// file name.
#[cfg(feature = "rdmacm")]
pub fn rdmacm() -> Result<&'static crate::RdmaCm, LoadError> {
    RDMACM
        .get_or_init(|| {
            let library = path("FERROVIA_LIBRDMACM", LIBRDMACM);
            // SAFETY: as for libibverbs: librdmacm's initialisers only set
            // up its state, and symbols match the installed headers.
            unsafe { crate::RdmaCm::new(&library) }.map_err(|e| LoadError {
                library,
                reason: e.to_string(),
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}
