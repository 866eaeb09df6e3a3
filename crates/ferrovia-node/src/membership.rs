//! Store-backed membership: a job's ranks meet through etcd and stay
//! members while their lease lives.
//!
//! - Each member holds a lease (`StoreConfig::lease_ttl`) and a key per
//!   rank (`/ferrovia/JOB/members/RANK`), created only where none exists:
//!   a second process claiming a live rank fails
//!   ([`BootstrapError::RankClaimed`](crate::BootstrapError::RankClaimed)).
//!   The world is the set of live leases.
//! - A member that dies stops renewing its lease; the store deletes its
//!   key once the lease expires, and every survivor's watch turns that
//!   into [`MemberEvent::Left`] (a member that leaves of its own accord,
//!   dropping its node, says so first: [`LeaveReason::Departed`]).
//!   [`Node::next_member_event`](crate::Node::next_member_event) flushes
//!   the connection to it before handing the event out.
//! - A new process claims the free rank, publishes its links, and every
//!   survivor sees [`MemberEvent::Joined`]: each calls
//!   [`Node::admit`](crate::Node::admit) and the two connect over the
//!   control path, as a reconnect does, with a fresh connection generation
//!   and the newcomer's incarnation checked, so nothing of the dead
//!   member's connection reaches the new one.
//! - Named values ([`Node::publish`](crate::Node::publish),
//!   [`Node::fetch`](crate::Node::fetch)) live as long as their publisher.
//!
//! `config` and `event` are always built; the store itself only with the
//! feature `etcd` (`etcd.rs`, else the stand-in `not_built.rs`): this
//! module alone asks.

mod config;
mod event;
mod node_api;

#[cfg(feature = "etcd")]
mod etcd;
#[cfg(not(feature = "etcd"))]
mod not_built;

pub use config::{ETCD_PORT, StoreConfig};
#[cfg(feature = "etcd")]
pub(crate) use etcd::{Joining, Membership};
pub use event::{LeaveReason, MemberEvent};
#[cfg(not(feature = "etcd"))]
pub(crate) use not_built::{Joining, Membership};
