//! What can go wrong with a transfer, typed, naming the entry, the peer
//! and the rail where there is one.

use std::time::Duration;

use ferrovia_channel::{DrainError, TransportError};
use ferrovia_mr::MrError;
use ferrovia_node::NodeError;
use ferrovia_types::{AccessFlags, CompletionError};

use crate::PreparedList;

/// A transfer error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransferError {
    /// An entry's local range is outside the segment.
    #[error("entry {entry}: its local range {start}..{end} is outside the {len}-byte segment")]
    LocalOutOfRange {
        /// The entry's index in its list.
        entry: usize,
        /// Its local range.
        start: usize,
        /// Its end.
        end: usize,
        /// The segment's length.
        len: usize,
    },
    /// An entry's remote range is outside the peer's segment.
    #[error("entry {entry}: {len} bytes at {offset} are outside peer {peer}'s {size}-byte segment")]
    RemoteOutOfRange {
        /// The entry.
        entry: usize,
        /// Its peer.
        peer: usize,
        /// Where it starts in the peer's segment.
        offset: u64,
        /// Its length.
        len: u64,
        /// The peer's segment's length.
        size: u64,
    },
    /// An entry names a peer the job does not have, or one whose segment
    /// was not given.
    #[error(
        "entry {entry}: no peer {peer} (the job has {world} ranks, segments were given for {given})"
    )]
    UnknownPeer {
        /// The entry.
        entry: usize,
        /// The peer it names.
        peer: usize,
        /// Ranks in the job.
        world: usize,
        /// Remote segments given.
        given: usize,
    },
    /// An entry is empty.
    #[error("entry {entry} is empty")]
    EmptyEntry {
        /// The entry.
        entry: usize,
    },
    /// A list with no entry.
    #[error("the descriptor list is empty")]
    EmptyList,
    /// The peer's segment does not grant what the operation needs.
    #[error("entry {entry}: peer {peer}'s segment does not grant {right} (it grants {granted})")]
    MissingRight {
        /// The first entry that needs it.
        entry: usize,
        /// Its peer.
        peer: usize,
        /// The right: `REMOTE_WRITE` or `REMOTE_READ`.
        right: &'static str,
        /// What the segment grants.
        granted: AccessFlags,
    },
    /// The lease does not lend the bytes the list was prepared on (another
    /// segment's): nothing is posted.
    #[error("the lease does not lend the segment the list was prepared on")]
    LeaseMismatch,
    /// A read into bytes the program only lends (a shared lease): reads
    /// need an exclusive or owned one.
    #[error("a read needs the segment exclusively (an exclusive or owned lease)")]
    ReadNeedsExclusive,
    /// The peer's region refused the access: it was deregistered, or its
    /// key is not (or no longer) valid.
    #[error(
        "entry {entry} (peer {peer}, rail {rail}): the peer's region refused the access (deregistered?): {error}"
    )]
    RemoteAccess {
        /// The entry.
        entry: usize,
        /// Its peer.
        peer: usize,
        /// The rail it went over.
        rail: usize,
        /// The completion's error.
        error: CompletionError,
    },
    /// A piece failed (not a lost rail: those are retried elsewhere).
    #[error("entry {entry} (peer {peer}, rail {rail}) failed: {error}")]
    Completion {
        /// The entry.
        entry: usize,
        /// Its peer.
        peer: usize,
        /// The rail.
        rail: usize,
        /// The completion's error.
        error: CompletionError,
    },
    /// Every rail to the peer failed: it died, or the network to it did.
    #[error(
        "peer {peer} is unreachable on every rail (entry {entry} unfinished){}",
        last_failure(.last)
    )]
    PeerUnreachable {
        /// The peer.
        peer: usize,
        /// The first entry not done (the list's length when only the
        /// notification was left).
        entry: usize,
        /// The failure that took the last rail, when this batch saw it
        /// (`None`: the rails were lost before it).
        last: Option<CompletionError>,
    },
    /// The batch did not finish by its deadline (it may still: wait again).
    #[error("the batch did not finish within {after:?}: {pending} of {total} runs pending")]
    Timeout {
        /// Runs not done.
        pending: usize,
        /// Runs in all.
        total: usize,
        /// How long it waited.
        after: Duration,
    },
    /// A notification longer than one carries.
    #[error("a {len}-byte notification: at most {max} bytes")]
    NotificationTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A rail or peer out of the engine's range.
    #[error("no rail {rail} to peer {peer}: the engine has {rails} rails and {peers} peers")]
    NoSuchRail {
        /// The rail named.
        rail: usize,
        /// The peer named.
        peer: usize,
        /// Rails the engine has.
        rails: usize,
        /// Peers.
        peers: usize,
    },
    /// A prepared list submitted again before its last batch finished
    /// (or whose last batch was forgotten: `mem::forget` of a scoped
    /// batch leaves its list busy for good; prepare another).
    #[error("the prepared list's last batch has not finished (or was forgotten)")]
    Busy,
    /// A prepared list or segment used with an engine it was not made for.
    #[error("{0}")]
    Mismatch(String),
    /// A scope's batches ended but draining the rails' work after them
    /// did not (requests flushed at the drain deadline, or errors nobody
    /// polled).
    #[error(transparent)]
    Drain(DrainError),
    /// A scope over this engine is already open (scopes do not nest); the
    /// closure did not run.
    #[error("a scope over this engine is already open; scopes do not nest")]
    NestedScope,
    /// The channel below.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// Memory registration.
    #[error(transparent)]
    Memory(#[from] MrError),
    /// The node (rails, exchanges, reconnects).
    #[error(transparent)]
    Node(#[from] NodeError),
}

fn last_failure(last: &Option<CompletionError>) -> String {
    last.map(|e| format!("; the last rail failed with {e}"))
        .unwrap_or_default()
}

/// An owned submission refused before anything was posted: why, and the
/// prepared list back to submit again. `?` turns it into its
/// [`TransferError`].
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct Rejected {
    /// Why.
    pub error: TransferError,
    /// The list it was given (boxed only on this cold path, so a
    /// `Result` of a batch stays small).
    pub list: Box<PreparedList>,
}

impl From<Rejected> for TransferError {
    fn from(r: Rejected) -> Self {
        r.error
    }
}
