//! What a member of a store-backed job is told about the others.

use std::time::Duration;

/// A change of a store-backed job's membership
/// ([`Node::next_member_event`](crate::Node::next_member_event)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemberEvent {
    /// `rank`'s member is gone. By the time the event is handed out, this
    /// rank's connection to it is flushed: work with it fails at once,
    /// naming it.
    Left {
        /// The rank.
        rank: usize,
        /// Which member of that rank (the store revision that created its
        /// key).
        incarnation: u64,
        /// Why.
        reason: LeaveReason,
    },
    /// A new process took `rank`'s place and published its links:
    /// [`Node::admit`](crate::Node::admit) connects to it.
    Joined {
        /// The rank.
        rank: usize,
        /// The new member.
        incarnation: u64,
    },
    /// This rank's own lease is gone (it was cut off from the store for
    /// longer than the lease): the job counts it out, and a replacement
    /// may take its rank.
    Evicted,
    /// The store stopped answering. The data path runs on; membership
    /// changes (a member's death included) wait until it answers again.
    StoreLost {
        /// The error that told.
        reason: String,
    },
    /// The store answers again.
    StoreBack {
        /// How long it was lost.
        after: Duration,
    },
}

/// Why a member left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaveReason {
    /// Its lease expired: it died, hung, or lost the store for longer than
    /// the lease.
    LeaseExpired,
    /// It left of its own accord (its node was dropped).
    Departed,
}
