//! Raw libibverbs bindings for ferrovia.
//!
//! Generated at build time by bindgen from the rdma-core headers that
//! pkg-config finds (`libibverbs`, and `librdmacm` with the `rdmacm`
//! feature), so the layouts always match the installed library. The
//! static-inline verbs of `verbs.h` (`ibv_post_send`, `ibv_post_recv`,
//! `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_query_port`, the `ibv_wr_*`
//! family, `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll`,
//! `ibv_create_cq_ex`, `ibv_query_device_ex`, ...) are reachable under their
//! usual names: bindgen's `wrap_static_fns` emits C wrappers for them, which
//! the build compiles and links.
//!
//! This is the escape hatch below `ferrovia-verbs`; everything here is
//! `unsafe` and follows the C API's rules (see the rdma-core man pages).
//!
//! Building needs `libibverbs-dev` and `libclang-dev`; a missing one fails
//! the build with a single line naming the package (`cargo xtask deps`
//! installs them).

#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
