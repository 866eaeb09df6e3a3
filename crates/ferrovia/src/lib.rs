//! ferrovia: RDMA verbs for Rust, safely.
//!
//! The facade re-exports every layer: [`sys`] (raw libibverbs, the escape
//! hatch), [`verbs`] (safe RAII verbs objects), and, as they land, the
//! memory registry, the scoped channel core, the multi-peer node and the UCX
//! fallback transport.
#![forbid(unsafe_code)]

pub use ferrovia_sys as sys;
pub use ferrovia_verbs as verbs;
