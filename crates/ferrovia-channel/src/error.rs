//! The channel layer's errors.

use ferrovia_mr::MrError;
use ferrovia_types::CompletionError;

/// Result alias of the channel layer.
pub type TransportResult<T> = Result<T, TransportError>;

/// Everything that can go wrong posting or completing work.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// A registration or view was refused.
    #[error(transparent)]
    Memory(#[from] MrError),
    /// A work request completed with an error status.
    #[error(transparent)]
    Completion(#[from] CompletionError),
    /// A buffer element is larger than one SGE can describe.
    #[error("a {len}-byte buffer is longer than one work request element allows (u32::MAX)")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// More elements than a request takes.
    #[error("{count} buffer elements in one request; at most {max}")]
    TooManyElements {
        /// How many were given.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The local buffers of a write or read exceed the remote region.
    #[error("{local} local bytes do not fit the {remote}-byte remote region")]
    RemoteTooSmall {
        /// Local bytes.
        local: u64,
        /// Remote region length.
        remote: u64,
    },
    /// A peer index beyond the peers of the channel.
    #[error("peer index {peer} is out of range: there are {count} peers")]
    NoSuchPeer {
        /// The index given.
        peer: usize,
        /// How many peers exist.
        count: usize,
    },
    /// A send or receive queue stayed full until the deadline.
    #[error("the {queue} queue of peer {peer} stayed full ({depth} outstanding) for {after:?}")]
    QueueFull {
        /// `"send"` or `"receive"`.
        queue: &'static str,
        /// The peer index.
        peer: usize,
        /// Its depth.
        depth: u32,
        /// How long posting waited.
        after: std::time::Duration,
    },
    /// Work did not complete within the wait's timeout.
    #[error("work request {wr_id} with peer {peer} did not complete within {after:?}")]
    Timeout {
        /// The request.
        wr_id: u64,
        /// The peer it was posted to (or expected from).
        peer: usize,
        /// How long it was waited for.
        after: std::time::Duration,
    },
    /// A receive from the shared pool got no message within the wait's
    /// timeout.
    #[error("receive {wr_id} from the shared pool got no message within {after:?}")]
    PoolTimeout {
        /// The request.
        wr_id: u64,
        /// How long it was waited for.
        after: std::time::Duration,
    },
    /// The connection was moved to the error state (after a failure or a
    /// drain deadline); it must be reconnected before posting again. Also
    /// what a wait on work with that peer returns at once, if the work's
    /// own completion has not arrived.
    #[error("peer {peer}'s connection is in the error state; reconnect before posting")]
    Broken {
        /// The peer index.
        peer: usize,
    },
    /// The peer of a connection made by address disconnected (verbs: the
    /// connection manager's `DISCONNECTED`; UCX: its endpoint failed):
    /// the connection was flushed, so the work failed, and posting to it
    /// fails too.
    #[error("the peer at {addr} (peer {peer}) disconnected{}", completion.map(|c| format!(": {c}")).unwrap_or_default())]
    Disconnected {
        /// The peer index.
        peer: usize,
        /// Its address.
        addr: std::net::SocketAddr,
        /// How the work completed, if its completion arrived.
        completion: Option<CompletionError>,
    },
    /// An atomic's local result buffer is not 8 bytes.
    #[error("an atomic's result buffer must be 8 bytes, not {len}")]
    AtomicResultSize {
        /// Its length.
        len: usize,
    },
    /// An atomic's remote word is not 8-byte aligned.
    #[error("an atomic's remote word at {addr:#x} is not 8-byte aligned")]
    MisalignedAtomic {
        /// The remote address.
        addr: u64,
    },
    /// The transport (or device) cannot run remote atomics.
    #[error(
        "remote atomics are not supported towards peer {peer} (the device's atomic_cap is none)"
    )]
    AtomicsUnsupported {
        /// The peer index.
        peer: usize,
    },
    /// A receive for any peer on a channel without a shared receive pool.
    #[error(
        "no shared receive pool: build the channel with shared_receives(n) to post receives for any peer"
    )]
    NoSharedPool,
    /// The shared receive pool was flushed at a drain deadline; the
    /// channel takes no more receives.
    #[error("the shared receive pool was flushed at a drain deadline and takes no more receives")]
    SharedPoolFlushed,
    /// A receive for one peer on a channel whose receives all come from the
    /// shared pool.
    #[error(
        "receives come from the shared pool on this channel: post_receive_any instead of a receive for peer {peer}"
    )]
    SharedPoolOnly {
        /// The peer asked for.
        peer: usize,
    },
    /// The remote region's owner did not grant the right the operation
    /// needs (checked before posting; the descriptor carries its rights).
    #[error("{op} needs a right the remote region's owner did not grant (it granted {granted})")]
    RemoteAccessDenied {
        /// The operation.
        op: &'static str,
        /// The remote rights the descriptor carries.
        granted: ferrovia_types::AccessFlags,
    },
    /// A datagram longer than the datagram channel's limit (the smallest
    /// of every peer's: a path MTU on verbs), refused before sending.
    #[error("a {len}-byte datagram exceeds the limit of {max} bytes")]
    DatagramTooLong {
        /// Its length.
        len: usize,
        /// The channel's limit.
        max: usize,
    },
    /// A list post with no request in it.
    #[error("a list post needs at least one request")]
    EmptyList,
    /// The configuration is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The backend failed (its own typed error inside: a `VerbsError`
    /// naming the verb and its errno, a `UcxError`).
    #[error(transparent)]
    Backend(Box<dyn std::error::Error + Send + Sync>),
}

/// Why draining a scope did not end cleanly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "scope drain: {} request(s) failed unobserved{}, {} flushed after the {deadline:?} deadline{}",
    failed.len(),
    failed.first().map(|e| format!(" (first: {e})")).unwrap_or_default(),
    flushed.len(),
    if *unpolled > 0 { format!(", {unpolled} left unpolled in a manual scope") } else { String::new() }
)]
#[non_exhaustive]
pub struct DrainError {
    /// Requests that completed with an error nobody polled.
    pub failed: Vec<CompletionError>,
    /// wr_ids still outstanding at the deadline, flushed by moving their
    /// connection to the error state.
    pub flushed: Vec<u64>,
    /// The drain deadline.
    pub deadline: std::time::Duration,
    /// Requests a manual scope left for the drain to collect.
    pub unpolled: usize,
}

/// What [`Channel::scope`](crate::Channel::scope) returns on failure: the
/// closure's error and the drain's, kept apart.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScopeError<E> {
    /// The closure failed; every request drained cleanly.
    #[error("scope closure failed: {0}")]
    Closure(E),
    /// The closure succeeded but draining its work did not.
    #[error(transparent)]
    Drain(DrainError),
    /// Both failed.
    #[error("scope closure failed: {closure}; and {drain}")]
    Both {
        /// The closure's error.
        closure: E,
        /// The drain's.
        drain: DrainError,
    },
    /// A scope over the same channel is already open (scopes over one
    /// channel do not nest); the closure did not run.
    #[error("a scope over this channel is already open; scopes over one channel do not nest")]
    Nested,
}

impl<E> ScopeError<E> {
    /// The closure's error, if it failed.
    pub fn closure(&self) -> Option<&E> {
        match self {
            ScopeError::Closure(e) | ScopeError::Both { closure: e, .. } => Some(e),
            ScopeError::Drain(_) | ScopeError::Nested => None,
        }
    }

    /// The drain's error, if draining failed.
    pub fn drain(&self) -> Option<&DrainError> {
        match self {
            ScopeError::Drain(d) | ScopeError::Both { drain: d, .. } => Some(d),
            ScopeError::Closure(_) | ScopeError::Nested => None,
        }
    }
}
