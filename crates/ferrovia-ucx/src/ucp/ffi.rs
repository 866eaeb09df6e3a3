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
