//! ferrovia: RDMA verbs for Rust, safely.
//!
//! The facade re-exports every layer as a module, and the everyday types at
//! the root:
//!
//! | module | crate | what |
//! |---|---|---|
//! | [`types`] | `ferrovia-types` | the vocabulary every transport shares: elements, access rights, completion status |
//! | `sys` | `ferrovia-sys` | raw libibverbs bindings: the documented escape hatch (feature `verbs`) |
//! | `verbs` | `ferrovia-verbs` | safe RAII verbs objects: device, context, PD, CQ, RC QP, MR (feature `verbs`) |
//! | [`mr`] | `ferrovia-mr` | memory-region registry, views, remote descriptors |
//! | [`channel`] | `ferrovia-channel` | scoped posting: `Channel`, `MultiChannel`, work requests; no backend |
//! | `verbs_transport` | `ferrovia-verbs-transport` | the verbs backend: `VerbsBuilder`, endpoints and reconnects, the PD registrar (feature `verbs`) |
//! | [`node`] | `ferrovia-node` | the multi-peer `Node`: launchers, rendezvous, barrier |
//! | `ucx` | `ferrovia-ucx` | the UCX fallback transport (feature `ucx`) |
//! | `asynchronous` | `ferrovia-async` | operations as tokio futures that own their buffers (feature `async`) |
//! | `transfer` | `ferrovia-transfer` | batches of descriptors to many peers over several rails, notifications, failover (feature `transfer`) |
//!
//! # Features
//! - `verbs` (default): the verbs layers and backend (`VerbsBuilder`
//!   builds a `Channel` on a device), and the [`Node`]
//!   backend on RDMA devices. Needs rdma-core's headers at build time;
//!   libibverbs is loaded at run time, so a program built with it starts
//!   where libibverbs is missing and picks UCX (an `info` log says why).
//! - `ucx` (default): the UCX fallback transport as `ferrovia::ucx`, and
//!   the [`Node`] backend used where no RDMA device is usable. Needs the
//!   system UCX (`libucx-dev`) at build time.
//! - `ucx-vendored` (off by default): `ucx` over UCX 1.22.0, built from
//!   its release tarball by the `ucx-rs` crate and linked statically, so
//!   neither `libucx-dev` nor UCX's plugin directory is needed
//!   (`ferrovia::ucx::ucx_version` says which UCX runs).
//! - `async` (off by default): [`AsyncNode`] and friends, operations as
//!   futures on tokio that own their registered buffers (dropping or
//!   forgetting one never frees memory the NIC or UCX may touch); pulls in
//!   tokio, which programs without it never build.
//! - `transfer` (default): [`TransferEngine`] and the transfer layer,
//!   built only on the public APIs of the channel and node layers.
//! - `metrics` (off by default): the statistics every layer counts
//!   ([`Node::stats`]) published through the `metrics` facade
//!   (`Node::publish_metrics`, `ChannelStats::publish`), for the recorder
//!   the program installs (`examples/prometheus.rs` exports them).
//! - `default-features = false, features = ["ucx"]` builds without
//!   rdma-core at all; `features = ["verbs"]` without UCX.
//!
//! # Backends
//! [`Node`] runs on verbs when a device with an active port opens, else on
//! UCX (tcp or shared memory on a laptop). `FERROVIA_BACKEND=verbs|ucx`
//! overrides; [`Node::backend`] and the `info` log say which was chosen.
//! The same program, the same work requests and the same
//! [`RemoteMemoryRegion`] values run on both.
//!
//! # Quick start: a node
//! ```no_run
//! use std::time::Duration;
//! use ferrovia::prelude::*;
//! use ferrovia::{Node, NodeError};
//!
//! # fn main() -> Result<(), NodeError> {
//! // Rank, world size and rendezvous from torchrun, srun, mpirun or FERROVIA_*.
//! let mut node = Node::from_env()?;
//! println!("rank {} of {} on {}", node.rank(), node.world_size(), node.describe());
//! let everyone: Vec<usize> = (0..node.world_size()).collect();
//! node.barrier(&everyone, Duration::from_secs(10))?;
//! # Ok(())
//! # }
//! ```
//!
//! # Registered memory: what safe code may do
//! Memory only this process changes ([`Local`], the default, also with
//! remote read) derefs to `[u8]`; while a work request borrows it the
//! compiler forbids writing, moving or freeing it. Memory a peer may write
//! ([`Shared`]: remote write or atomics) is never a slice, because the
//! optimizer may assume a slice does not change: read it with
//! `load_u64`, `read_into` or `to_vec` once the peer said it is done, and
//! end peers' access with `into_local` to get plain bytes back. The rules
//! in full are in [`mr`]'s documentation.
//!
//!
//! ## Features
#![doc = document_features::document_features!()]
// docs.rs (`[package.metadata.docs.rs]`) marks each item with the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(
    feature = "verbs",
    doc = r#"
# Quick start: two verbs channels
```no_run
use std::time::Duration;
use ferrovia::{Gather, ReceiveWorkRequest, RegisterOptions, Scatter, TransportError};
use ferrovia::{VerbsBuilder, VerbsChannel};

# fn main() -> Result<(), Box<dyn std::error::Error>> {
let mut a = VerbsBuilder::default().build()?;
let mut b = VerbsBuilder::default().build()?;
let (ea, eb) = (a.endpoint()?, b.endpoint()?); // normally exchanged over the network
a.connect(&eb)?;
b.connect(&ea)?;

let msg = a.registry().register_buffer(b"hello, rdma".to_vec(), RegisterOptions::local())?;
let mut inbox = b.registry().register_buffer(vec![0u8; 64], RegisterOptions::local())?;
b.scope(|s| {
    // The receive borrows `inbox` until it completes; the compiler
    // refuses any other use of it meanwhile.
    let pending = s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
    a.send(&[Gather::of(&msg)?])?;
    let got = pending.wait(Duration::from_secs(5))?.into_received().unwrap_or_default();
    println!("received {:?}", std::str::from_utf8(got));
    Ok::<_, TransportError>(())
})?;
# Ok(())
# }
```
"#
)]
#![cfg_attr(
    feature = "async",
    doc = r#"
# Quick start: async (feature `async`)
Every operation is a future that owns its buffer: moved in, handed back in
the result (also on error). Dropping or forgetting a future never frees
memory the NIC or UCX may still write; see [`asynchronous`].
```no_run
use std::time::Duration;
use ferrovia::{AsyncNode, Node, RegisterOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node = Node::from_env_or_launch(2)?;
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
        let node = AsyncNode::new(node)?;
        let peer = 1 - node.rank();
        let inbox = node.registry().alloc(64, RegisterOptions::local())?;
        let incoming = node.receive(peer, inbox); // posted now, owns `inbox`
        node.barrier(&[0, 1], Duration::from_secs(10)).await?;
        let msg = node.registry().register_buffer(b"hello, async".to_vec(), RegisterOptions::local())?;
        let msg = node.send(peer, msg).await?.buf; // the buffer comes back
        let got = tokio::time::timeout(Duration::from_secs(5), incoming).await??;
        println!("{:?} (sent {} bytes)", std::str::from_utf8(got.received()), msg.len());
        Ok(())
    })
}
```
"#
)]
#![forbid(unsafe_code)]

/// What a ferrovia program usually wants in scope: the node's scope
/// trait, the buffer elements and every work request.
pub mod prelude {
    pub use ferrovia_channel::{
        AtomicWorkRequest, Gather, PeerAtomicWorkRequest, PeerReadWorkRequest,
        PeerReceiveWorkRequest, PeerSendWorkRequest, PeerWriteWorkRequest, ReadWorkRequest,
        ReceiveWorkRequest, Scatter, SendWorkRequest, WriteWorkRequest,
    };
    pub use ferrovia_mr::RegisterOptions;
    pub use ferrovia_node::NodeScope;
}

#[cfg(feature = "async")]
pub use ferrovia_async as asynchronous;
pub use ferrovia_channel as channel;
pub use ferrovia_mr as mr;
pub use ferrovia_node as node;
#[cfg(feature = "pmix")]
pub use ferrovia_pmix as pmix;
#[cfg(feature = "verbs")]
pub use ferrovia_sys as sys;
#[cfg(feature = "transfer")]
pub use ferrovia_transfer as transfer;
pub use ferrovia_types as types;
#[cfg(feature = "ucx")]
pub use ferrovia_ucx as ucx;
#[cfg(feature = "verbs")]
pub use ferrovia_verbs as verbs;
#[cfg(feature = "verbs")]
pub use ferrovia_verbs_transport as verbs_transport;

#[cfg(feature = "async")]
// `Op`, `Done` and `Failed` stay in `ferrovia::asynchronous`: generic
// names a program meets through `AsyncNode`'s methods, not types it types.
pub use ferrovia_async::{Async, AsyncConfig, AsyncError, AsyncMultiChannel, AsyncNode};
pub use ferrovia_channel::{
    AtomicOp, AtomicWorkRequest, Channel, ChannelBuilder, ChannelStats, Datagram, Datagrams,
    DrainError, Gather, LatencyHistogram, MultiChannel, OpCounts, PeerAtomicWorkRequest,
    PeerReadWorkRequest, PeerReceiveWorkRequest, PeerSendWorkRequest, PeerStats,
    PeerWriteWorkRequest, PollingScope, ReadWorkRequest, ReceiveWorkRequest, Scatter, ScopeError,
    ScopedPendingWork, SendWorkRequest, TransportError, TransportResult, WorkDone,
    WriteWorkRequest,
};
pub use ferrovia_mr::{
    Local, MemoryRegionView, MrError, MrRegistry, RegisterOptions, RegisteredBuffer,
    RegisteredMemory, RemoteMemoryRegion, Shared, SharedBuffer,
};
pub use ferrovia_node::{
    ACCEPT_DATA_MAX, AbandonCause, Backend, BarrierAlgorithm, BarrierError, BootstrapError,
    CONNECT_DATA_MAX, ConnectError, Connector, DatagramConfig, Engine, Incoming, LeaveReason,
    Listener, ListenerBuilder, MemberEvent, Node, NodeBuilder, NodeError, NodeScope, Outgoing,
    REJECT_DATA_MAX, Rail, RailError, RailSpec, StoreConfig,
};
// `Op` and `Report` stay in `ferrovia::transfer` (the async layer has an
// `Op` of its own).
#[cfg(feature = "transfer")]
pub use ferrovia_transfer::{
    DescriptorList, Notification, PreparedList, RailPolicy, RemoteSegment, Segment,
    TransferBuilder, TransferEngine, TransferError,
};
pub use ferrovia_types::{AccessFlags, CompletionError, WcClass, WcStatus};
#[cfg(feature = "ucx")]
pub use ferrovia_ucx::UcxError;
#[cfg(feature = "verbs")]
pub use ferrovia_verbs::{ConnectOptions, Endpoint, PollPath, PostPath, VerbsError};
#[cfg(feature = "verbs")]
pub use ferrovia_verbs_transport::{
    VerbsBuilder, VerbsChannel, VerbsConfig, VerbsMultiChannel, VerbsTransport, VerbsWindows,
    Window,
};
