//! A PMIx client for ferrovia's bootstrap.
//!
//! Under a PMIx launcher (Open MPI's `mpirun`, `srun --mpi=pmix`) the
//! ranks of a job already share an authenticated key-value exchange:
//! [`Client::put`] what peers need, [`Client::commit`], [`Client::fence`]
//! (collecting data, with a deadline), then [`Client::get`] what each peer
//! put.
//!
//! The bindings are generated at build time by bindgen from the headers
//! `pkg-config pmix` finds (Debian's `libpmix-dev`, PMIx 4), and the
//! library is loaded at run time ([`LIBPMIX`], or `FERROVIA_LIBPMIX`), so a
//! program built with PMIx support starts on a host without libpmix; only
//! [`Client::init`] fails there, naming the library.

mod client;
mod error;
mod fence;
mod ffi;
mod load;

pub use client::Client;
pub use error::PmixError;
pub use load::{LIBPMIX, available};

/// Whether this process was started by a PMIx launcher: `PMIX_RANK` and
/// `PMIX_NAMESPACE` are set (`get` reads a variable).
pub fn launched_by_pmix(get: &dyn Fn(&str) -> Option<String>) -> bool {
    let set = |k| get(k).is_some_and(|v: String| !v.trim().is_empty());
    set("PMIX_RANK") && set("PMIX_NAMESPACE")
}
