//! The vocabulary ferrovia's transports share. It binds no RDMA or UCX
//! library; its only foreign calls are libc's (`sysconf` for the page
//! size) and C socket-address layouts, both audited `unsafe` below.
//!
//! The scoped channel core and both backends (verbs in `ferrovia-verbs`,
//! UCX in `ferrovia-ucx`) speak these types, as `wgpu-types` serves
//! `wgpu`'s backends: a UCX-only build needs neither rdma-core's headers
//! nor its library. The values are the verbs ABI's own (`IBV_ACCESS_*`,
//! `IBV_WC_*`, the `ibv_sge` layout), so the verbs backend converts for
//! free; `ferrovia-verbs` checks at compile time that they match the
//! installed headers.
//!
//! - [`Sge`]: one scatter/gather element (address, length, local key).
//! - [`AccessFlags`]: the rights of a registration.
//! - [`WcStatus`] with its [`WcClass`], [`WcOpcode`]: what a completion
//!   says, on every transport.
//! - [`CompletionError`]: a request that completed with an error status.
//! - [`page_size`].
//! - [`deadline_after`]: a wait's deadline, for any timeout.
//! - [`RawSockAddr`]: a socket address in C's `sockaddr_storage` form,
//!   for the connection layers of both backends.
#![deny(unsafe_code)] // audited exceptions: `page` (sysconf), `sock_addr` (C layouts)

mod access;
mod completion_error;
mod deadline;
mod opcode;
mod page;
mod sge;
mod sock_addr;
mod wc_status;

pub use access::AccessFlags;
pub use completion_error::CompletionError;
pub use deadline::deadline_after;
pub use opcode::WcOpcode;
pub use page::page_size;
pub use sge::Sge;
pub use sock_addr::RawSockAddr;
pub use wc_status::{WcClass, WcStatus};
