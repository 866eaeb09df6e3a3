//! Loading libpmix at run time, once per process.

use std::sync::OnceLock;

use crate::error::PmixError;
use crate::ffi::PmixLib;

/// The library [`Client::init`](crate::Client::init) loads, unless `FERROVIA_LIBPMIX` names another
/// path. Debian's `libpmix2` installs it on the linker's path.
pub const LIBPMIX: &str = "libpmix.so.2";

static LIB: OnceLock<Result<PmixLib, PmixError>> = OnceLock::new();

/// libpmix, loaded on first use (the same answer for the life of the
/// process).
pub(crate) fn library() -> Result<&'static PmixLib, PmixError> {
    LIB.get_or_init(|| {
        let library = std::env::var("FERROVIA_LIBPMIX").unwrap_or_else(|_| LIBPMIX.to_owned());
        // SAFETY: loading runs libpmix's initialisers, which set up its
        // framework tables only; every symbol is then resolved against the
        // prototypes bindgen generated from the installed headers of the
        // same library (pkg-config pmix, version 4 or later).
        unsafe { PmixLib::new(&library) }.map_err(|e| PmixError::Load {
            library,
            reason: e.to_string(),
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Whether libpmix can be loaded here (without starting a client).
pub fn available() -> Result<(), PmixError> {
    library().map(|_| ())
}
