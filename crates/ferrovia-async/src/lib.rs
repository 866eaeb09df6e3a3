//! Async ferrovia on tokio: the operations of a [`Node`](ferrovia_node::Node)
//! or [`MultiChannel`](ferrovia_channel::MultiChannel) as futures that own
//! their buffers.
//!
//! - **Ownership.** An operation takes its registered buffer by value
//!   ([`OpBuffer`]: an owned `RegisteredBuffer`, a `SharedBuffer` as a
//!   source, or an `Arc` of either to share a source) and hands it back
//!   in its [`Done`] or its [`Failed`]. The engine, not the future, holds
//!   the buffer while the device or UCX may touch it, so dropping a future
//!   (a `tokio::time::timeout` expiring, a `select!` branch losing) or
//!   `mem::forget`-ing it never frees that memory early: a dropped
//!   operation's buffer waits for its completion and then goes to
//!   [`Async::take_returned`]; past a deadline its peer is flushed, as a
//!   scope's drain would. Borrowed buffers are refused by the types.
//! - **Kernel wake-ups.** One reactor task per engine sleeps on the
//!   transport's event fd through tokio's `AsyncFd` (verbs: the completion
//!   channel; UCX: an eventfd its progress thread signals) and wakes the
//!   futures whose requests completed; [`Wake::BusyPoll`] trades a core
//!   for latency.
//! - **Send.** The engine sits behind one lock, held briefly and never
//!   across a wait, so the futures are `Send` and run on any tokio runtime.
//! - **Ending.** Dropping the engine with requests outstanding blocks the
//!   dropping thread while sends, writes and atomics finish (receives and
//!   reads are flushed at once), up to the drain deadline: see
//!   [`Async`]'s docs. [`Async::shutdown`] does the same without blocking
//!   the runtime and says what it flushed.
//!
//! ```no_run
//! use std::time::Duration;
//! use ferrovia_async::Async;
//! use ferrovia_mr::RegisterOptions;
//! use ferrovia_node::Node;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let node = Async::new(Node::from_env()?)?;
//! let peer = 1 - node.rank();
//! let inbox = node.registry().alloc(64, RegisterOptions::local())?;
//! let msg = node.registry().register_buffer(b"ping".to_vec(), RegisterOptions::local())?;
//! let incoming = node.receive(peer, inbox); // posted now
//! node.barrier(&[0, 1], Duration::from_secs(10)).await?;
//! let sent = node.send(peer, msg).await?; // the buffer comes back
//! let got = tokio::time::timeout(Duration::from_secs(5), incoming).await??;
//! assert_eq!(got.received(), b"ping");
//! # drop(sent);
//! # Ok(())
//! # }
//! ```
//!
//! ## Features
#![doc = document_features::document_features!()]
// docs.rs (`[package.metadata.docs.rs]`) marks each item with the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod barrier;
mod buffer;
mod config;
mod engine;
mod error;
mod gate;
mod handle;
mod op;
mod op_list;
mod reactor;
mod shutdown;

pub use barrier::Barrier;
pub use buffer::{OpBuffer, Source};
pub use config::{AsyncConfig, DEFAULT_SPIN, Wake};
pub use engine::Target;
pub use error::{AsyncError, Failed};
pub use ferrovia_channel::Returned;
pub use ferrovia_channel::engine::Flushed;
pub use handle::Async;
pub use op::{Done, Op, OpResult};
pub use op_list::OpList;
pub use shutdown::Shutdown;

/// An async [`Node`](ferrovia_node::Node).
pub type AsyncNode = Async<ferrovia_node::Node>;
/// An async [`MultiChannel`](ferrovia_channel::MultiChannel).
pub type AsyncMultiChannel = Async<ferrovia_channel::MultiChannel>;
