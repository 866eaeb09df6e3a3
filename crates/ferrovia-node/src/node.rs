//! `Node`: one rank of a job, connected to every other rank.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::Duration;

use ferrovia_channel::engine::{ChannelCore, run_scope};
use ferrovia_channel::transport::Transport;
use ferrovia_channel::{
    ChannelConfig, Gather, MultiChannel, MultiPeer, PeerWriteWorkRequest, PollingScope, ScopeError,
    ScopeTarget, TransportError, Unpolled, WriteWorkRequest,
};
use ferrovia_mr::{MrRegistry, RemoteMemoryRegion, WIRE_MAX_LEN};

use crate::backend::{self, Renewer};
use crate::backend_name::Backend;
use crate::barrier::{self, BarrierAlgorithm, RankState};
use crate::bootstrap::launcher::{self, Engine, Launcher};
use crate::bootstrap::meeting::Kept;
use crate::bootstrap::pmix::PmixMeeting;
use crate::builder::NodeBuilder;
use crate::control_path::ControlPath;
use crate::error::{BarrierError, BootstrapError, NodeError};
use crate::membership::Membership;
use crate::sync_region::{DIR_SLOT, SyncRegion};

/// One rank of a job: a connection to every rank (its own included, in
/// loopback), a barrier, and scoped posting to peers by rank.
///
/// ```no_run
/// use std::time::Duration;
/// use ferrovia_node::{Node, NodeScope};
///
/// # fn main() -> Result<(), ferrovia_node::NodeError> {
/// let mut node = Node::from_env()?; // torchrun, srun, mpirun or FERROVIA_*
/// let everyone: Vec<usize> = (0..node.world_size()).collect();
/// node.scope(|s| {
///     s.barrier(&everyone, Duration::from_secs(10))?;
///     Ok::<_, ferrovia_node::NodeError>(())
/// })?;
/// # Ok(())
/// # }
/// ```
pub struct Node {
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
    pub(crate) backend: Backend,
    description: String,
    // Dropped before `sync`: the transport stops before the memory peers
    // write into is freed.
    pub(crate) multi: MultiChannel,
    sync: SyncRegion,
    barrier: RefCell<RankState>,
    algorithm: BarrierAlgorithm,
    launcher: Option<Launcher>,
    pub(crate) renewer: Renewer,
    /// The channel settings the node was built with, which its rails take.
    pub(crate) channel: ChannelConfig,
    /// Its verbs settings, which its verbs rails take.
    pub(crate) verbs: backend::VerbsSettings,
    /// Control ports, the token, and every link's generations.
    pub(crate) control: ControlPath,
    engine: Engine,
    /// A store-backed job's membership (left when the node drops).
    pub(crate) membership: Option<Box<Membership>>,
    /// Under PMIx, the client (finalised when the node drops).
    _pmix: Option<Box<PmixMeeting>>,
}

/// What a build hands [`Node::assemble`].
pub(crate) struct Assembly {
    pub(crate) rank: usize,
    pub(crate) world_size: usize,
    pub(crate) backend: Backend,
    pub(crate) description: String,
    pub(crate) multi: MultiChannel,
    pub(crate) sync: SyncRegion,
    pub(crate) algorithm: BarrierAlgorithm,
    pub(crate) launcher: Option<Launcher>,
    pub(crate) renewer: Renewer,
    pub(crate) channel: ChannelConfig,
    pub(crate) verbs: backend::VerbsSettings,
    pub(crate) control: ControlPath,
    pub(crate) engine: Engine,
    pub(crate) kept: Kept,
}

impl Node {
    /// A node from its built parts.
    pub(crate) fn assemble(a: Assembly) -> Node {
        let (membership, pmix) = match a.kept {
            Kept::Nothing => (None, None),
            Kept::Pmix(p) => (None, Some(p)),
            Kept::Store(m) => (Some(m), None),
        };
        let mut control = a.control;
        if let Some(m) = &membership {
            control.set_incarnations(m.incarnation(), m.incarnations().to_vec());
        }
        Node {
            rank: a.rank,
            world_size: a.world_size,
            backend: a.backend,
            description: a.description,
            multi: a.multi,
            barrier: RefCell::new(RankState::new(a.rank, a.world_size)),
            sync: a.sync,
            algorithm: a.algorithm,
            launcher: a.launcher,
            renewer: a.renewer,
            channel: a.channel,
            verbs: a.verbs,
            control,
            engine: a.engine,
            membership,
            _pmix: pmix,
        }
    }

    /// How this node's ranks met (rank 0's rendezvous, PMIx, a store).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Forgets everything of the barrier and the directory that involves
    /// `rank`, for a new member of that rank (`membership`): its pair
    /// counts, its words in this rank's sync region, and its region.
    pub(crate) fn reset_peer_sync(&mut self, rank: usize, region: RemoteMemoryRegion) {
        self.barrier.borrow_mut().reset_peer(rank);
        self.sync.reset_from(rank);
        if let Some(r) = self.sync.remote.get_mut(rank) {
            *r = region;
        }
        self.sync.gathers.set(0);
    }
}

/// Teardown, per peer, for operators: the connections close as the
/// fields drop, right after this (the transport flushes and says goodbye).
impl Drop for Node {
    fn drop(&mut self) {
        let _span = tracing::info_span!("teardown", rank = self.rank, world_size = self.world_size)
            .entered();
        for peer in (0..self.world_size).filter(|&p| p != self.rank) {
            tracing::debug!(
                peer,
                generation = self.control.generation(0, peer),
                "closing the connection"
            );
        }
        tracing::info!("leaving the job");
    }
}

impl ScopeTarget for Node {
    fn core(&self) -> &ChannelCore {
        self.multi.core()
    }
}

impl MultiPeer for Node {}

impl barrier::Member for Node {
    fn rank(&self) -> usize {
        self.rank
    }

    fn sync(&self) -> &SyncRegion {
        &self.sync
    }

    fn barrier_state(&self) -> &RefCell<RankState> {
        &self.barrier
    }

    fn algorithm(&self) -> BarrierAlgorithm {
        self.algorithm
    }
}

impl Node {
    /// A builder for rank `rank` of `world_size`, meeting at `rendezvous`.
    pub fn builder(rank: usize, world_size: usize, rendezvous: impl Into<String>) -> NodeBuilder {
        NodeBuilder::new(rank, world_size, rendezvous)
    }

    /// Builds a node from the launcher's environment (torchrun, Slurm,
    /// Open MPI / PMIx, `FERROVIA_HOSTFILE` or `FERROVIA_*`).
    pub fn from_env() -> Result<Node, NodeError> {
        let info = launcher::from_vars(&|k| std::env::var(k).ok())?;
        NodeBuilder::from_launch(&info).build()
    }

    /// Like [`Node::from_env`]; but when no launcher configured this
    /// process (a plain `cargo run`), this process becomes the launcher: it
    /// starts `ranks` copies of itself on this machine as one job, waits
    /// for them, and exits with their status instead of returning.
    /// The job gets a random token, and rank 0 listens on 127.0.0.1 at a
    /// port the OS chooses. `ranks` must be at least 1.
    pub fn from_env_or_launch(ranks: usize) -> Result<Node, NodeError> {
        NodeBuilder::from_env_or_launch(ranks)?.build()
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The transport in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The transport in words, e.g. `verbs on rxe0` or `ucx (UCX_TLS=tcp)`.
    pub fn describe(&self) -> &str {
        &self.description
    }

    /// The launcher the configuration came from, if any.
    pub fn launcher(&self) -> Option<Launcher> {
        self.launcher
    }

    /// Where this rank's control port listens (a peer's reconnect dials
    /// it): on the interface toward the rendezvous.
    pub fn control_addr(&self) -> SocketAddr {
        self.control.port.addr()
    }

    /// Messages dropped because they came on a replaced connection (sent
    /// before a [`Node::reconnect`]) or on one this side broke (see
    /// [`MultiChannel::stale_dropped`]).
    pub fn stale_dropped(&self) -> u64 {
        self.multi.stale_dropped()
    }

    /// The transport underneath, as a `T` when it is one: on the verbs
    /// backend `node.transport_as::<VerbsTransport>()` gives the queue
    /// pairs and the protection domain (`VerbsTransport::pd`).
    pub fn transport_as<T: Transport>(&self) -> Option<&T> {
        self.multi.transport_as()
    }

    /// A registry for buffers used with this node.
    pub fn registry(&self) -> &MrRegistry {
        self.multi.registry()
    }

    /// Runs `f` with a [`PollingScope`] over every rank (see
    /// `Channel::scope`); [`NodeScope`] adds the barrier.
    pub fn scope<'env, F, T, E>(&'env mut self, f: F) -> Result<T, ScopeError<E>>
    where
        F: for<'scope> FnOnce(&mut PollingScope<'scope, 'env, Node>) -> Result<T, E>,
    {
        run_scope(&*self, Unpolled::Drain, f)
    }

    /// Like [`Node::scope`], with unpolled requests reported.
    pub fn manual_scope<'env, F, T, E>(&'env mut self, f: F) -> Result<T, ScopeError<E>>
    where
        F: for<'scope> FnOnce(&mut PollingScope<'scope, 'env, Node>) -> Result<T, E>,
    {
        run_scope(&*self, Unpolled::Report, f)
    }

    /// A barrier among `peers` outside any scope.
    pub fn barrier(&mut self, peers: &[usize], timeout: Duration) -> Result<(), NodeError> {
        self.scope(|s| s.barrier(peers, timeout)).map_err(flatten)
    }

    /// Gives every rank `region`, and returns every rank's region (index =
    /// rank): the usual way to learn where peers' buffers are. Collective:
    /// every rank must call it.
    pub fn all_gather_remote(
        &mut self,
        region: RemoteMemoryRegion,
        timeout: Duration,
    ) -> Result<Vec<RemoteMemoryRegion>, NodeError> {
        let mut wire = [0u8; WIRE_MAX_LEN];
        let encoded = region.encode_into(&mut wire);
        let slot = &mut self.sync.dir_src;
        slot[0] = encoded.len() as u8;
        slot[1..=encoded.len()].copy_from_slice(encoded);
        let (me, n) = (self.rank, self.world_size);
        let everyone: Vec<usize> = (0..n).collect();
        let round = self.sync.gathers.get();
        self.sync.gathers.set(round + 1);
        self.scope(|s| {
            let sync = &s.target().sync;
            let g = [Gather::of(&sync.dir_src)?];
            let mut writes = Vec::with_capacity(n);
            for p in 0..n {
                let dst = sync.remote[p]
                    .sub_region(sync.dir_offset(round, me), DIR_SLOT as u64)
                    .map_err(TransportError::from)?;
                writes.push(s.post_write(PeerWriteWorkRequest::new(
                    p,
                    WriteWorkRequest::new(&g, dst)?,
                ))?);
            }
            for w in writes {
                w.wait(timeout)?;
            }
            s.barrier(&everyone, timeout)?;
            (0..n)
                .map(|p| {
                    let bytes = sync.dir_entry(round, p).ok_or_else(|| {
                        BootstrapError::Protocol(format!("rank {p} wrote no directory entry"))
                    })?;
                    Ok(RemoteMemoryRegion::decode(&bytes)?)
                })
                .collect::<Result<Vec<_>, NodeError>>()
        })
        .map_err(flatten)
    }
}

impl<E: Into<NodeError>> From<ScopeError<E>> for NodeError {
    fn from(e: ScopeError<E>) -> Self {
        flatten(e)
    }
}

/// A scope error as a node error (the closure's first, else the drain's).
pub(crate) fn flatten<E: Into<NodeError>>(e: ScopeError<E>) -> NodeError {
    match e {
        ScopeError::Closure(e) | ScopeError::Both { closure: e, .. } => e.into(),
        ScopeError::Drain(d) => match d.failed.first() {
            Some(c) => NodeError::Transport(TransportError::Completion(*c)),
            None => NodeError::Transport(TransportError::Config(d.to_string())),
        },
        _ => NodeError::Transport(TransportError::Config("scope failed".into())),
    }
}

/// What a scope over a [`Node`] adds to the peer posts: rank, world size
/// and the barrier.
pub trait NodeScope {
    /// Waits until every rank in `peers` (sorted, containing this rank)
    /// entered this same barrier, or fails: after `timeout` (plus a 0.5 s
    /// query window) naming the ranks that did not arrive, or at once when
    /// a listed rank's connection is broken or a listed rank said it gave
    /// up on this barrier ([`BarrierError::Abandoned`]: a rank that fails
    /// a barrier tells the listed ranks it can still reach, which pass it
    /// on). Collective: ranks must call
    /// the barriers that list both of them in the same order (see the
    /// `barrier` module docs), failed ones included.
    fn barrier(&mut self, peers: &[usize], timeout: Duration) -> Result<(), BarrierError>;
    /// Like [`NodeScope::barrier`], without checking the peer list (the
    /// caller guarantees it is sorted, unique, in range and contains this
    /// rank). A wrong list can hang until the timeout, and can leave this
    /// rank's barrier counts with the ranks it names out of step with
    /// theirs, after which barriers with them are no longer matched.
    fn barrier_unchecked(&mut self, peers: &[usize], timeout: Duration)
    -> Result<(), BarrierError>;
    /// This rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// The registry for buffers used with this node (any backend).
    fn registry(&self) -> &MrRegistry;
}

impl NodeScope for PollingScope<'_, '_, Node> {
    fn barrier(&mut self, peers: &[usize], timeout: Duration) -> Result<(), BarrierError> {
        let node = self.target();
        let at = barrier::validate(peers, node.rank, node.world_size)?;
        barrier::run(self, peers, at, timeout)
    }

    fn barrier_unchecked(
        &mut self,
        peers: &[usize],
        timeout: Duration,
    ) -> Result<(), BarrierError> {
        let me = self.target().rank;
        let at = peers.iter().position(|&p| p == me).unwrap_or(0);
        barrier::run(self, peers, at, timeout)
    }

    fn rank(&self) -> usize {
        self.target().rank
    }

    fn world_size(&self) -> usize {
        self.target().world_size
    }

    fn registry(&self) -> &MrRegistry {
        self.target().registry()
    }
}
