//! Raw UCX bindings (bindgen, at build time). Private to `crate::ucp`:
//! only the wrappers beside it make the calls (each in an `unsafe` block
//! that argues its case), and no binding's name is seen outside the tree.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    unused_imports,
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]

include!(concat!(env!("OUT_DIR"), "/ucx_bindings.rs"));

// With `vendored`, UCX's static archives and the references that keep its
// component constructors come with `ucx-rs`: a crate that never names it
// is dropped from the link, and `ucp_init` fails without a word.
#[cfg(feature = "vendored")]
use ucx_rs as _;
