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
//! - [`MultiChannel`]: one connection per peer over one protection domain.
//! - [`Transport`]: the seam the core drives (verbs RC queue pairs here,
//!   UCX in `ferrovia-ucx`), with an event fd an event loop can sleep on.
//! - Owned requests ([`OwnedOp`], [`ChannelCore::try_post_owned`]): the
//!   engine, not a borrow, keeps the buffer until the completion; what
//!   `ferrovia-async`'s futures post.
//! - [`Pieces`]: one-sided work checked once and posted many times, in
//!   runs with one ticket each, under a [`Lease`] of the local bytes (a
//!   scope's borrow, or owned); what a transfer layer posts.
//! - [`Rails`]: several transports to the same peers (devices, UCX
//!   workers) as one, so one core and one scope drive them all.
//!
//!
//! ## Features
#![doc = document_features::document_features!()]
#![cfg_attr(
    feature = "verbs",
    doc = r#"
```no_run
use std::time::Duration;
use ferrovia_channel::{Channel, Gather, ReceiveWorkRequest, Scatter, SendWorkRequest, TransportError};
use ferrovia_mr::RegisterOptions;

# fn main() -> Result<(), Box<dyn std::error::Error>> {
let mut a = Channel::builder().build()?;
let mut b = Channel::builder().build()?;
let (ea, eb) = (a.endpoint()?, b.endpoint()?);
a.connect(&eb)?;
b.connect(&ea)?;
let msg = a.registry().register_buffer(b"ping".to_vec(), RegisterOptions::local())?;
let mut inbox = b.registry().register_buffer(vec![0u8; 64], RegisterOptions::local())?;
b.scope(|rx| {
    let recv = rx.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
    a.send(&[Gather::of(&msg)?])?;
    let got = recv.wait(Duration::from_secs(5))?.into_received().unwrap_or_default();
    assert_eq!(got, b"ping");
    Ok::<_, TransportError>(())
})?;
# Ok(())
# }
```
"#
)]

mod atomic;
mod builder;
mod channel;
#[cfg(feature = "verbs")]
mod cm_watch;
mod config;
mod core;
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
#[cfg(feature = "verbs")]
mod qp_table;
mod rails;
mod request;
mod ring;
mod scope;
mod slots;
mod transport;
#[cfg(feature = "verbs")]
mod verbs_transport;

pub use atomic::{AtomicOp, AtomicWorkRequest, PeerAtomicWorkRequest};
pub use builder::ChannelBuilder;
pub use channel::Channel;
pub use config::ChannelConfig;
pub use core::ChannelCore;
pub use element::{Gather, Scatter};
pub use error::{DrainError, ScopeError, TransportError, TransportResult};
pub use multi::{MultiChannel, MultiPeer};
pub use op::{Completion, OpKind, RecvOp, SendOp};
pub use owned::{OwnedOp, OwnedPoll, OwnedTicket, Refused};
pub use owned_buf::{OwnedBuf, Returned};
pub use owned_shutdown::Flushed;
pub use pieces::{Lease, PieceError, PieceState, PieceTicket, Pieces};
#[cfg(feature = "verbs")]
pub use qp_table::QpRef;
pub use rails::Rails;
pub use request::{
    MAX_ELEMENTS, PeerReadWorkRequest, PeerReceiveWorkRequest, PeerSendWorkRequest,
    PeerWriteWorkRequest, ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest, WriteWorkRequest,
};
pub use scope::{PollingScope, ScopeTarget, ScopedPendingWork, Unpolled, WorkDone, run_scope};
pub use transport::{SharedFlush, Transport};
#[cfg(feature = "verbs")]
pub use verbs_transport::VerbsTransport;
