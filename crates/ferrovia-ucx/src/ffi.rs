//! Raw UCX bindings (bindgen, at build time) and the `UCS_PTR_*` macros
//! rewritten in Rust. The only module of the crate with `unsafe` FFI.
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
