//! Raw libibverbs bindings for ferrovia.
//!
//! Generated at build time by bindgen from the rdma-core headers that
//! pkg-config finds (`libibverbs`, and `librdmacm` with the `rdmacm`
//! feature), so the layouts always match the installed headers.
//!
//! - Types and constants are at the crate root.
//! - Exported functions (`ibv_open_device`, `ibv_reg_mr`, ...) are methods
//!   of [`Verbs`], the library loaded at run time by [`verbs()`]: nothing
//!   links `libibverbs.so.1`, so a program built with verbs support starts
//!   on a host without rdma-core and can fall back to another transport.
//! - The static-inline data-path verbs (`ibv_post_send`, `ibv_post_recv`,
//!   `ibv_post_srq_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`, the `ibv_wr_*`
//!   family, `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll`,
//!   `ibv_wc_read_*`) are free functions under their usual names: bindgen's
//!   `wrap_static_fns` emits C wrappers for them, which the build compiles.
//!   They call through the function pointers of objects the loaded library
//!   made, so they need no symbol of their own.
//!
//! This is the escape hatch below `ferrovia-verbs`; everything here is
//! `unsafe` and follows the C API's rules (see the rdma-core man pages).
//!
//! Building needs `libibverbs-dev` and `libclang-dev`; a missing one fails
//! the build with a single line naming the package (`cargo xtask deps`
//! installs them). Running needs `libibverbs.so.1` only to use verbs.
//!
//! ## Features
#![doc = document_features::document_features!()]
// docs.rs (`[package.metadata.docs.rs]`) marks each item with the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]

mod types {
    include!(concat!(env!("OUT_DIR"), "/types.rs"));
}

// bindgen's loader code predates edition 2024's unsafe blocks.
#[allow(unsafe_op_in_unsafe_fn)]
mod verbs_fns {
    use super::types::*;
    include!(concat!(env!("OUT_DIR"), "/verbs_fns.rs"));
}

#[cfg(feature = "rdmacm")]
#[allow(unsafe_op_in_unsafe_fn)]
mod rdmacm_fns {
    use super::types::*;
    include!(concat!(env!("OUT_DIR"), "/rdmacm_fns.rs"));
}

mod load;

pub use load::{LIBIBVERBS, LoadError, verbs};
#[cfg(feature = "rdmacm")]
pub use load::{LIBRDMACM, rdmacm};
#[cfg(feature = "rdmacm")]
pub use rdmacm_fns::RdmaCm;
pub use types::*;
pub use verbs_fns::Verbs;
