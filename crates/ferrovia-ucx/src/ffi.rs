//! Raw UCX bindings (bindgen, at build time) and the `UCS_PTR_*` macros
//! rewritten in Rust. This module only declares them: the calls are made
//! (each in an `unsafe` block that argues its case) by `context`,
//! `engine` and its submodules, `events`, `keys`, `netdev`, `notify`,
//! `tag`, `transport` and `error`.
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
