//! UCX fallback transport for ferrovia.
//!
//! Contract: implements the channel core's transport seam over UCX (tcp,
//! shared memory, or UCX's own RDMA transports), so a ferrovia program
//! runs unchanged on machines without an RDMA device. In-flight
//! operations own what UCX may still touch.
//!
//! Built so far: bindgen over the system UCX (`pkg-config ucx`; UCX 1.13
//! on Debian 12: `ucp_init` is inline, so `ucp_init_version` is called; the
//! `UCS_PTR_*` macros are rewritten in Rust), a context with configuration
//! overrides (`TLS=tcp`), and a worker with its address. Endpoints,
//! messaging, the progress thread, put/get with a key directory and the
//! `Node` integration are the next steps.

mod error;
mod ffi;
mod worker;

pub use error::UcxError;
pub use worker::{UcxContext, Worker};
