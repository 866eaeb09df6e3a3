//! Scoped channel core of ferrovia: RDMA work whose buffers the borrow
//! checker protects until the device is done with them.
//!
//! - Work requests ([`SendWorkRequest`], [`WriteWorkRequest`],
//!   [`ReceiveWorkRequest`], [`ReadWorkRequest`], and their `Peer*` forms)
//!   are built from [`Gather`] elements borrowing `&'env [u8]` and
//!   [`Scatter`] elements borrowing `&'env mut [u8]`, each checked against
//!   its registration.
//! - [`Channel::scope`] gives a [`PollingScope`]; posts return
//!   [`ScopedPendingWork`] handles with `poll`, `spin_poll` and
//!   `wait(timeout)`. When the scope ends, outstanding work is polled to
//!   completion; past the drain deadline the connection is moved to the
//!   error state so every request is flushed, and the scope reports them.
//!   It never returns while the device may still touch a borrowed buffer,
//!   and a panic in the closure still drains.
//! - A completed receive or read hands its buffer back
//!   ([`WorkDone::into_received`]), so a loop can read what arrived
//!   without closing the scope.
//! - Fast path: completions are polled in batches and routed by `wr_id`
//!   through a preallocated slot table (no allocation per request), small
//!   payloads go inline, and [`PollingScope::post_write_list`] posts a list
//!   with one doorbell and selective signalling.
//! - [`MultiChannel`]: one connection per peer sharing one completion stream.
//! - [`Transport`](transport::Transport) (module [`transport`]): the seam the core drives, with an event fd an event
//!   loop can sleep on. The backends implement it in crates of their own:
//!   verbs RC queue pairs in `ferrovia-verbs-transport` (which builds
//!   channels on a device and trades endpoints), UCX in `ferrovia-ucx`.
//!   This crate knows neither.
//! - Owned requests (module [`engine`]: `OwnedOp`,
//!   `ChannelCore::try_post_owned`): the
//!   engine, not a borrow, keeps the buffer until the completion; what
//!   `ferrovia-async`'s futures post.
//! - [`Pieces`]: one-sided work checked once and posted many times, in
//!   runs with one ticket each, under a [`Lease`] of the local bytes (a
//!   scope's borrow, or owned); what a transfer layer posts.
//! - [`Rails`]: several transports to the same peers (devices, UCX
//!   workers) as one, so one core and one scope drive them all.
//! - [`ChannelStats`]: what the engine did per peer (operations and bytes
//!   by kind, completions by status, flushes, reconnects, sampled
//!   latencies), from `stats()`; published through the `metrics` facade
//!   with the feature of that name.
//!
//! # Features
#![doc = document_features::document_features!()]
// docs.rs (`[package.metadata.docs.rs]`) marks each item with the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod atomic;
mod builder;
mod channel;
mod config;
mod core;
mod counters;
mod datagram;
mod datagram_over;
mod drain;
mod element;
mod error;
mod multi;
mod op;
mod owned;
mod owned_buf;
mod owned_list;
mod owned_shutdown;
mod owned_slots;
mod pieces;
mod post;
mod post_pieces;
mod posting;
mod rails;
mod request;
mod ring;
mod scope;
mod seam;
mod slots;
mod stats;
#[cfg(feature = "metrics")]
mod stats_metrics;

pub use atomic::{AtomicOp, AtomicWorkRequest, PeerAtomicWorkRequest};
pub use builder::ChannelBuilder;
pub use channel::Channel;
pub use config::ChannelConfig;
pub use datagram::{Datagram, DatagramTransport, Datagrams};
pub use datagram_over::ChannelDatagrams;
pub use element::{Gather, Scatter};
pub use error::{DrainError, ScopeError, TransportError, TransportResult};
pub use multi::{MultiChannel, MultiPeer};
pub use owned_buf::{OwnedBuf, Returned};
pub use pieces::{Lease, PieceError, PieceState, PieceTicket, Pieces};
pub use rails::Rails;
pub use request::{
    MAX_ELEMENTS, PeerReadWorkRequest, PeerReceiveWorkRequest, PeerSendWorkRequest,
    PeerWriteWorkRequest, ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest, WriteWorkRequest,
};
pub use scope::{PollingScope, ScopeTarget, ScopedPendingWork, Unpolled, WorkDone};
pub use stats::{ChannelStats, LatencyHistogram, OpCounts, PeerStats};

/// What a backend implements: the transport seam the core drives and the
/// operations it posts through it (`ferrovia-verbs-transport`,
/// `ferrovia-ucx`, a test double).
pub mod transport {
    pub use crate::op::{Completion, OpKind, RecvOp, SendOp};
    pub use crate::seam::{SharedFlush, Transport};
}

/// What a layer built on the core uses: the core itself, its owned
/// requests (an engine, not a borrow, keeps the buffer: `ferrovia-async`'s
/// futures), their shutdown, and the scope runner for a target of its
/// own (`ferrovia-node`'s `Node`).
pub mod engine {
    pub use crate::core::ChannelCore;
    pub use crate::owned::{OwnedOp, OwnedPoll, OwnedTicket, Refused};
    pub use crate::owned_shutdown::Flushed;
    pub use crate::scope::run_scope;
}
