//! The bindings: types and constants from `pmix.h`, and the library's
//! functions as a struct of pointers loaded at run time. Private to the
//! crate: the rest of it calls PMIx through `client` and `fence`.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    unreachable_pub,
    missing_docs,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]

mod types {
    include!(concat!(env!("OUT_DIR"), "/types.rs"));
}

// bindgen's loader code predates edition 2024's unsafe blocks.
#[allow(unsafe_op_in_unsafe_fn)]
mod functions {
    use super::types::*;
    include!(concat!(env!("OUT_DIR"), "/functions.rs"));
}

pub(crate) use functions::PmixLib;
pub(crate) use types::*;
