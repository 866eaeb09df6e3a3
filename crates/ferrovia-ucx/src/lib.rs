//! UCX fallback transport for ferrovia: the same scoped channel and
//! `Node` programs over UCX (tcp, shared memory, or UCX's own RDMA
//! transports) on machines without an RDMA device.
//!
//! - [`UcxTransport`] implements the channel core's
//!   [`Transport`](ferrovia_channel::transport::Transport) seam with verbs semantics:
//!   per-peer ordered sends that each consume one posted receive (tagged
//!   messages carrying the sender and the immediate), a message longer than
//!   the receive is a length error (`IBV_WC_LOC_LEN_ERR`), RDMA write and
//!   read via `ucp_put`/`ucp_get`, and write-with-immediate as a put,
//!   a flush and a notification.
//! - One progress thread owns the worker, its endpoints and requests, and
//!   makes progress whenever nobody else does. A user thread that posts
//!   issues its operations itself, and one that busy-polls takes a turn
//!   itself and takes its completions straight from the engine, whenever
//!   the worker is free (SERIALIZED mode, one lock): the fast path has no
//!   thread hand-off. Posts that find the worker busy are queued and
//!   issued before any later post. An operation's buffers stay in use
//!   until UCX reports it complete, and every UCX callback runs inside
//!   `catch_unwind`.
//! - [`UcxRegistrar`] registers memory with `ucp_mem_map`, and allocates
//!   the memory of `MrRegistry::alloc` with `ucp_mem_map(ALLOCATE)` (peers
//!   on the same host map it, so puts and gets to it are plain copies).
//!   Peers fetch a registration's packed rkey from its owner's key
//!   directory on first use, so a `RemoteMemoryRegion` is the same small
//!   `Copy` value as on verbs; range and rights are checked before every
//!   put or get, and a deregistered key is revoked at every peer that
//!   fetched it before its memory is unmapped.
//!   Dropping a registration revokes its key at every peer that fetched
//!   it and unmaps only once each has acknowledged (none of its accesses
//!   is in flight, later ones fail with `IBV_WC_REM_ACCESS_ERR`) or has its
//!   endpoint closed; a peer silent past
//!   [`UcxTransportBuilder::revocation_timeout`] is force-closed.
//! - Endpoints use peer error handling: a dead peer fails its work with
//!   `IBV_WC_RETRY_EXC_ERR` (the UCX status is the vendor error).
//! - Connection by address: a transport of one peer
//!   ([`UcxTransport::connect_peer`]) gets its endpoint from the peer's
//!   worker address, which its owner traded through a front door of its
//!   own (ferrovia-node's `Listener`: bounded, framed, on plain TCP). UCX's
//!   socket connection manager (`ucp_listener_create`) is not used: it
//!   aborts the process on malformed bytes from any client. The owner's
//!   TCP connection can stay with the transport as its link: when the peer
//!   closes it, its work fails (shared memory has no peer failure handling
//!   of its own).
//! - Where UCX may listen: [`Exposure`] and [`UcxContext::confined`] keep
//!   a one-host job off the network and a multi-host one on the interface
//!   toward its peers.
//!
//! Bindings are generated at build time over the system UCX
//! (`pkg-config ucx`; Debian 12 ships 1.13.1, where `ucp_init` is inline,
//! so `ucp_init_version` is called), or with the `vendored` feature over
//! UCX 1.22.0 built and linked statically by `ucx-rs`. Which one runs is
//! [`ucx_version`].
//!
//! ## Features
#![doc = document_features::document_features!()]

mod builder;
mod by_address;
mod context;
mod control;
mod dmabuf;
mod engine;
mod error;
mod exposure;
mod keys;
mod local_addr;
mod mapped;
mod netdev;
mod notify;
mod peer;
mod revoke;
mod tag;
mod transport;
mod ucp;

pub use builder::UcxTransportBuilder;
pub use by_address::EndpointFailure;
pub use context::{UcxContext, ucx_version};
pub use error::UcxError;
pub use exposure::Exposure;
pub use keys::UcxRegistrar;
pub use transport::UcxTransport;
#[cfg(feature = "test-hooks")]
pub use transport::{PostStats, ProgressStall};
