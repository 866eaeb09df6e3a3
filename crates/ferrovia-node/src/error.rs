//! The node layer's errors.

use std::time::Duration;

use ferrovia_channel::TransportError;
use ferrovia_mr::MrError;

use crate::backend_name::{Backend, UnknownBackend};

/// Why finding the job's configuration or meeting the other ranks failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BootstrapError {
    /// A launcher variable the configuration needs is not set.
    #[error("environment variable {name} is not set ({hint})")]
    MissingVar {
        /// The variable.
        name: &'static str,
        /// What sets it.
        hint: &'static str,
    },
    /// A launcher variable does not parse.
    #[error("environment variable {name}={value:?} is malformed: {reason}")]
    MalformedVar {
        /// The variable.
        name: String,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// A config file could not be read or parsed.
    #[error("config file {path}: {reason}")]
    ConfigFile {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The rank does not fit the world.
    #[error("rank {rank} is out of range for a world of {world_size}")]
    RankOutOfRange {
        /// The rank.
        rank: usize,
        /// The world size.
        world_size: usize,
    },
    /// Socket I/O failed.
    #[error("bootstrap {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A wait of the bootstrap ran out of time (for rank 0's answer, a
    /// rank's report, ...).
    #[error("bootstrap timed out after {after:?} waiting for {what}")]
    TimedOut {
        /// What was awaited.
        what: String,
        /// How long it waited.
        after: Duration,
    },
    /// A local job ([`Node::from_env_or_launch`](crate::Node::from_env_or_launch))
    /// was asked for no rank.
    #[error("a local job needs at least one rank; from_env_or_launch was asked for {ranks}")]
    NoRanks {
        /// The number asked for.
        ranks: usize,
    },
    /// Starting the ranks of a local job failed.
    #[error("local launch: {what}: {source}")]
    Launch {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Connecting to the ranks' transports after the exchange failed.
    #[error("rank {rank} could not connect to {}: {source}", peer.map_or_else(|| "its peers".to_owned(), |p| format!("rank {p}")))]
    Connect {
        /// This rank.
        rank: usize,
        /// The rank it could not connect to, when the transport says.
        peer: Option<usize>,
        /// What failed.
        #[source]
        source: Box<NodeError>,
    },
    /// Not every rank checked in before the deadline.
    #[error("bootstrap timed out after {after:?}: rank(s) {missing:?} never checked in")]
    MissingRanks {
        /// The ranks that did not arrive.
        missing: Vec<usize>,
        /// How long it waited.
        after: Duration,
    },
    /// The rendezvous could not be reached before the deadline.
    #[error("cannot reach the rendezvous at {addr} within {after:?}: {last}")]
    Unreachable {
        /// Its address.
        addr: String,
        /// How long it tried.
        after: Duration,
        /// The last connection error.
        last: String,
    },
    /// A peer's control port did not answer before the deadline (it is
    /// gone, or not reconnecting).
    #[error("rank {peer}'s control port {addr} did not answer within {after:?}: {last}")]
    PeerUnreachable {
        /// The peer.
        peer: usize,
        /// Its control port.
        addr: std::net::SocketAddr,
        /// How long it tried.
        after: Duration,
        /// The last connection error.
        last: String,
    },
    /// A reconnect met a call of the peer's that replaces another
    /// generation of the connection: one of the two calls is stray (made
    /// while the other side still used the connection, or left over from
    /// an attempt that failed half-way). Neither pairs with it; both sides
    /// now count the larger generation, so the next pair of calls meets.
    #[error(
        "rank {peer} reconnects generation {theirs} of the connection and this rank generation {ours}: a stray reconnect call on one side"
    )]
    ReconnectMismatch {
        /// The peer.
        peer: usize,
        /// The generation this rank replaces (its successful reconnects).
        ours: u32,
        /// The one the peer replaces.
        theirs: u32,
    },
    /// A reconnect met a call of the peer's for another of the pair's
    /// connections (`link`: 0 the node's own, a rail's id + 1): the two
    /// ranks called reconnects in different orders. Neither pairs with it.
    #[error(
        "rank {peer} reconnects link {theirs} and this rank link {ours}: the two called their reconnects in different orders"
    )]
    ReconnectLinkMismatch {
        /// The peer.
        peer: usize,
        /// The link this rank reconnects.
        ours: u32,
        /// The one the peer reconnects.
        theirs: u32,
    },
    /// [`Node::reconnect_with`](crate::Node::reconnect_with) was asked
    /// for link 0, the node's own connections: that is
    /// [`Node::reconnect`](crate::Node::reconnect).
    #[error("link 0 is the node's own connections: reconnect them with Node::reconnect")]
    ReservedLink,
    /// The rendezvous refused this rank.
    #[error("the rendezvous refused rank {rank}: {reason}")]
    Rejected {
        /// This rank.
        rank: usize,
        /// Its reason.
        reason: String,
    },
    /// The peer speaks another protocol version.
    #[error("bootstrap protocol version mismatch: ours {ours}, theirs {theirs}")]
    VersionMismatch {
        /// Our version.
        ours: u16,
        /// Theirs.
        theirs: u16,
    },
    /// A malformed or unexpected message.
    #[error("bootstrap protocol error: {0}")]
    Protocol(String),
    /// The bootstrap engine asked for is not in this build (its feature
    /// is off).
    #[error(
        "the {engine} bootstrap is not in this build: ferrovia-node was built without its `{feature}` feature"
    )]
    EngineNotBuilt {
        /// The engine (`PMIx`, `etcd`).
        engine: &'static str,
        /// The feature that builds it.
        feature: &'static str,
    },
    /// libpmix could not be loaded under a PMIx launcher.
    #[error(
        "started by a PMIx launcher, but {library} cannot be loaded: {reason} (install libpmix2, or set FERROVIA_RENDEZVOUS to meet through rank 0 instead)"
    )]
    PmixUnavailable {
        /// The library asked for.
        library: String,
        /// What the loader said.
        reason: String,
    },
    /// A PMIx call failed.
    #[error("PMIx: {call} failed: {reason} (status {status})")]
    Pmix {
        /// The PMIx function.
        call: &'static str,
        /// PMIx's status.
        status: i32,
        /// PMIx's words for it.
        reason: String,
    },
    /// The store did not answer a call within its bound (unreachable at
    /// start, or lost mid-job: the data path keeps running, but
    /// membership changes wait until it is back).
    #[error("the store at {endpoint} did not answer {what} within {after:?}: {reason}")]
    StoreUnavailable {
        /// The etcd endpoint.
        endpoint: String,
        /// The call.
        what: String,
        /// How long it was given.
        after: Duration,
        /// The last error.
        reason: String,
    },
    /// Another live process holds this rank in the store.
    #[error(
        "rank {rank} is held by another live process ({holder}); waited {waited:?} for it to come free"
    )]
    RankClaimed {
        /// The rank.
        rank: usize,
        /// Who holds it, as it described itself (host and process id).
        holder: String,
        /// How long this process waited for the holder's lease to expire.
        waited: Duration,
    },
    /// This process and the job in the store disagree (world size, token).
    #[error("the job in the store has {what} {theirs}, this rank {ours}")]
    JobMismatch {
        /// What differs.
        what: &'static str,
        /// This rank's.
        ours: String,
        /// The job's.
        theirs: String,
    },
    /// A membership call on a node that did not meet through a store.
    #[error("{what} needs a store-backed job (FERROVIA_STORE or NodeBuilder::store)")]
    NoStore {
        /// The call.
        what: &'static str,
    },
    /// [`Node::admit`](crate::Node::admit) for a rank with no live
    /// member that published its links.
    #[error("rank {rank} has no new member to admit (it has not joined, or left again)")]
    NotJoined {
        /// The rank.
        rank: usize,
    },
    /// Nothing was published under a name within the wait.
    #[error("nothing was published as {name:?} within {after:?}")]
    NotPublished {
        /// The name.
        name: String,
        /// How long it waited.
        after: Duration,
    },
    /// The backend asked for is not in this build (its feature is off).
    #[error(
        "the {backend} backend is not in this build: ferrovia-node was built without its `{backend}` feature"
    )]
    NotBuilt {
        /// The backend asked for.
        backend: Backend,
    },
}

/// Why a barrier failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BarrierError {
    /// The peer list is not a sorted set of valid ranks containing this one.
    #[error("invalid barrier peer list {peers:?} for rank {rank} of {world_size}: {reason}")]
    InvalidPeers {
        /// The list given.
        peers: Vec<usize>,
        /// This rank.
        rank: usize,
        /// The world size.
        world_size: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// Not every rank arrived: found by the query that follows the timeout,
    /// or a listed rank's connection breaking during the barrier. `after`
    /// is the time the barrier actually took, query window (0.5 s)
    /// included.
    #[error("barrier failed after {after:?}: rank(s) {missing:?} did not arrive")]
    Timeout {
        /// Ranks that did not arrive: they did not answer the query (dead,
        /// unreachable, or not in a barrier), or answered that they had not
        /// entered this barrier.
        missing: Vec<usize>,
        /// How long the barrier took.
        after: Duration,
    },
    /// The connection to listed ranks was already broken when the barrier
    /// began (a write to them failed, or an earlier barrier gave up on
    /// them): the barrier fails at once.
    #[error(
        "barrier failed after {after:?}: rank(s) {missing:?} did not arrive (connection already broken)"
    )]
    Unreachable {
        /// The ranks whose connection is broken.
        missing: Vec<usize>,
        /// How long the barrier took.
        after: Duration,
    },
    /// Every rank entered the barrier, but the signal exchange with `rank`
    /// did not complete: it left the barrier without completing it (it
    /// failed there, or ran ahead into later barriers with this rank), or
    /// is still waiting in it on a rank that left.
    #[error(
        "barrier failed after {after:?}: every rank arrived, but the exchange with rank {rank} did not complete"
    )]
    Incomplete {
        /// The rank whose signal never came (or whose write did not land).
        rank: usize,
        /// How long the barrier took.
        after: Duration,
    },
    /// `rank` called a different barrier (another rank list or algorithm)
    /// as its barrier number `count` with this rank: the ranks broke the
    /// rule that barriers on overlapping rank sets are called in the same
    /// order everywhere.
    #[error(
        "barrier mismatch after {after:?}: rank {rank} called another barrier (rank list or algorithm) as barrier {count} with this rank"
    )]
    Mismatch {
        /// The rank that called another barrier.
        rank: usize,
        /// The pair count at which the two ranks disagree.
        count: u64,
        /// How long the barrier took.
        after: Duration,
    },
    /// A listed rank gave up on this barrier and said so: `rank` failed
    /// it, and its abandon signal (or that of a rank that failed because
    /// of it, passing the word on) reached this rank. Nothing else can
    /// complete the barrier, so this rank fails without waiting out its
    /// timeout.
    #[error("barrier failed after {after:?}: rank {rank} abandoned it{because}")]
    Abandoned {
        /// The rank that gave up first, as far as this rank heard.
        rank: usize,
        /// Why it gave up, as far as it said.
        because: AbandonCause,
        /// How long the barrier took.
        after: Duration,
    },
    /// Posting or completing a barrier write failed.
    #[error("barrier transport failure: {0}")]
    Transport(#[from] TransportError),
}

impl BarrierError {
    /// Adds `more` to the time the barrier took (its failed writes settled
    /// after the verdict), so `after` stays the time the call took.
    pub(crate) fn add_time(&mut self, more: Duration) {
        match self {
            BarrierError::Timeout { after, .. }
            | BarrierError::Unreachable { after, .. }
            | BarrierError::Incomplete { after, .. }
            | BarrierError::Mismatch { after, .. }
            | BarrierError::Abandoned { after, .. } => *after += more,
            BarrierError::InvalidPeers { .. } | BarrierError::Transport(_) => {}
        }
    }
}

/// Why a rank abandoned a barrier, as it told its peers
/// ([`BarrierError::Abandoned`]). Displays as a parenthesis to append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AbandonCause {
    /// Its connection to this rank was already broken when it entered.
    Unreachable(usize),
    /// This rank did not arrive: it timed out and named it.
    Missing(usize),
    /// Something else (a mismatch, an incomplete exchange, a transport
    /// failure, a cancelled async barrier), or it did not say.
    Other,
}

impl std::fmt::Display for AbandonCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AbandonCause::Unreachable(p) => write!(f, " (its connection to rank {p} is broken)"),
            AbandonCause::Missing(p) => write!(f, " (rank {p} did not arrive)"),
            AbandonCause::Other => Ok(()),
        }
    }
}

/// Why a rail could not be opened ([`Node::open_rail`](crate::Node::open_rail)).
/// Each names the rail (its id), and the rank or device at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RailError {
    /// A rail's link is its id + 1 (0 is the node's own), so the largest
    /// id has none.
    #[error("rail id {id} is out of range (at most {})", u32::MAX - 1)]
    InvalidId {
        /// The id asked for.
        id: u32,
    },
    /// [`RailSpec::Device`](crate::RailSpec::Device) on a backend without
    /// devices to name (UCX picks its own: open a
    /// [`RailSpec::Worker`](crate::RailSpec::Worker)).
    #[error(
        "rail {rail}: the {backend} backend has no devices to name (asked for {device:?}); open RailSpec::Worker or RailSpec::Same instead"
    )]
    NoDevices {
        /// The rail.
        rail: u32,
        /// The node's backend.
        backend: Backend,
        /// The device asked for.
        device: String,
    },
    /// [`RailSpec::Worker`](crate::RailSpec::Worker) on a backend without
    /// UCX workers (verbs: name a device, or `RailSpec::Same`).
    #[error(
        "rail {rail}: the {backend} backend has no UCX workers; open RailSpec::Device or RailSpec::Same instead"
    )]
    NoWorkers {
        /// The rail.
        rail: u32,
        /// The node's backend.
        backend: Backend,
    },
    /// The RDMA device does not exist, or does not open.
    #[error("rail {rail}: cannot open RDMA device {device:?}: {reason}")]
    NoSuchDevice {
        /// The rail.
        rail: u32,
        /// The device asked for.
        device: String,
        /// What libibverbs said (the devices present, when it is absent).
        reason: String,
    },
    /// The RDMA device opened but none of its ports is active.
    #[error("rail {rail}: RDMA device {device:?} has no active port: {reason}")]
    NoActivePort {
        /// The rail.
        rail: u32,
        /// The device.
        device: String,
        /// What the port query said.
        reason: String,
    },
    /// Another rank could not open its side of the rail (it said why, in
    /// the exchange, so this rank did not wait for it).
    #[error("rail {rail}: rank {rank} could not open its side: {reason}")]
    PeerFailed {
        /// The rail.
        rail: u32,
        /// The rank that failed.
        rank: usize,
        /// Its error, as it said it (at most 200 bytes).
        reason: String,
    },
    /// A rank's side of the rail runs another backend than this rank's.
    #[error(
        "rail {rail}: rank {rank} runs the {theirs} backend and this rank {ours}: set FERROVIA_BACKEND the same on every rank"
    )]
    BackendMismatch {
        /// The rail.
        rail: u32,
        /// The other rank.
        rank: usize,
        /// This rank's backend.
        ours: Backend,
        /// The other rank's.
        theirs: Backend,
    },
    /// A rank opened another rail at the same time: the ranks called
    /// `open_rail` in different orders, or with different ids.
    #[error(
        "rank {rank} opened rail {theirs} while this rank opened rail {ours}: every rank must open the same rails in the same order"
    )]
    IdMismatch {
        /// The other rank.
        rank: usize,
        /// The rail this rank opened.
        ours: u32,
        /// The one the other rank opened.
        theirs: u32,
    },
    /// Opening this rank's side, trading the links or connecting failed.
    #[error("rail {rail}: {source}")]
    Failed {
        /// The rail.
        rail: u32,
        /// What failed.
        #[source]
        source: Box<NodeError>,
    },
}

impl From<UnknownBackend> for BootstrapError {
    fn from(e: UnknownBackend) -> Self {
        BootstrapError::MalformedVar {
            name: "FERROVIA_BACKEND".into(),
            value: e.0,
            reason: "expected verbs or ucx".into(),
        }
    }
}

impl From<UnknownBackend> for NodeError {
    fn from(e: UnknownBackend) -> Self {
        BootstrapError::from(e).into()
    }
}

impl RailError {
    /// `e`, as rail `rail`'s.
    pub(crate) fn failed(rail: u32, e: NodeError) -> NodeError {
        RailError::Failed {
            rail,
            source: Box::new(e),
        }
        .into()
    }
}

/// " (link N)" for a link other than the node's own.
fn on_link(link: u32) -> String {
    match link {
        0 => String::new(),
        l => format!(" (link {l})"),
    }
}

/// Everything that can go wrong building or using a `Node`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// Configuration or rendezvous.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// A barrier.
    #[error(transparent)]
    Barrier(#[from] BarrierError),
    /// Posting or completing work.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// Registering memory.
    #[error(transparent)]
    Memory(#[from] MrError),
    /// Opening a rail ([`Node::open_rail`](crate::Node::open_rail)).
    #[error(transparent)]
    Rail(#[from] RailError),
    /// Replacing the connection to `peer` failed.
    #[error("reconnecting to rank {peer}{} failed after {after:?}: {source}", on_link(*link))]
    Reconnect {
        /// The rank on the other side.
        peer: usize,
        /// Which of the pair's connections: 0 the node's own
        /// ([`Node::reconnect`](crate::Node::reconnect)), else the one
        /// [`Node::reconnect_with`](crate::Node::reconnect_with) named.
        link: u32,
        /// How long it tried.
        after: Duration,
        /// What failed.
        #[source]
        source: Box<NodeError>,
    },
}
