//! Batches of one-sided transfers for ferrovia: the job the people who
//! use RDMA most do (a KV cache moving from prefill to decode ranks,
//! weights to many readers). Register a few large segments once, prepare
//! a list of thousands of pieces (local views and peers' remote ranges)
//! once, and submit it as often as needed, as writes or reads, to many
//! peers over several rails, with a notification each target gets once
//! the whole batch has landed.
//!
//! - **Descriptor lists** ([`DescriptorList`], [`TransferEngine::prepare`]):
//!   every entry checked once (its ranges, peer, the remote rights), cut
//!   into slices, every slice made a piece on every rail; submitting a
//!   [`PreparedList`] again costs only the posting (no allocation).
//! - **Submission** in a scope ([`TransferEngine::scope`],
//!   [`TransferScope::submit`]): the batch borrows the segment's bytes (a
//!   [`Lease`]) and the list until every run is
//!   complete or flushed, as a channel's scope does; or owned
//!   ([`TransferEngine::submit`], [`OwnedBatch`]): the runs hold the lease,
//!   which owns the bytes and keys, so dropping or forgetting the batch (or
//!   its future: [`OwnedBatch`] is one) never frees memory a NIC may touch.
//!   A batch ends done ([`Report`]) or failed ([`TransferError`], naming
//!   the entry, peer, rail and completion status); every wait has a
//!   deadline.
//! - **Rails** ([`TransferBuilder::rails`]): one connection per peer per
//!   rail (verbs: a device of its own; UCX: a worker of its own), driven
//!   as one channel; runs of slices are spread by a [`RailPolicy`].
//! - **Notifications** ([`TransferEngine::wait_notification`]): one-sided,
//!   into a ring per sender, written only after every run of the batch to
//!   that target completed.
//! - **Failover**: a run whose rail failed goes over another; the batch
//!   succeeds if one rail to each peer survives, and its report names the
//!   lost (rail, peer) connections; [`TransferEngine::reconnect_rail`]
//!   brings one back without disturbing the others.
//!
//! Ordering: within a run, pieces leave and land in list order (one
//! rail); runs to one peer over different rails may land in any order
//! relative to each other; a notification lands after every piece of its
//! batch to that peer. Nothing is ordered between peers.
//!
//! ## Features
#![doc = document_features::document_features!()]
// docs.rs (`[package.metadata.docs.rs]`) marks each item with the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod batch;
mod engine;
mod error;
mod list;
mod notify;
mod numa;
mod owned;
mod policy;
mod prepare;
mod scoped;
mod segment;
mod state;

pub use batch::{MAX_RAILS, Op, Report};
pub use engine::{TransferBuilder, TransferEngine, target_options};
pub use error::{Rejected, TransferError};
/// What a batch borrows or holds of a segment's bytes
/// ([`Segment::lease`], [`Segment::lease_mut`], [`Segment::into_lease`]).
pub use ferrovia_channel::Lease;
pub use list::{DescriptorList, Entry};
pub use notify::{NOTIFY_MAX, Notification};
pub use owned::OwnedBatch;
pub use policy::RailPolicy;
pub use prepare::{PreparedList, Slicing};
pub use scoped::{ScopedBatch, TransferScope};
pub use segment::{RemoteSegment, Segment};
