//! `Node`: one rank of a job, connected to every other rank.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::Duration;

use ferrovia_channel::engine::{ChannelCore, run_scope};
use ferrovia_channel::transport::Transport;
use ferrovia_channel::{
    ChannelBuilder, ChannelConfig, Gather, MultiChannel, MultiPeer, PeerWriteWorkRequest,
    PollingScope, ScopeError, ScopeTarget, TransportError, Unpolled, WriteWorkRequest,
};
use ferrovia_mr::{MrRegistry, RemoteMemoryRegion, WIRE_MAX_LEN};
use serde::{Deserialize, Serialize};

use crate::backend::{self, Link, Opened, Renewer};
use crate::backend_name::Backend;
use crate::barrier::{self, BarrierAlgorithm, RankState};
use crate::bootstrap::launcher::{self, LaunchInfo, Launcher};
use crate::bootstrap::rendezvous::{self, Rendezvous, RendezvousConfig};
use crate::bootstrap::token::{self, TokenSource};
use crate::control::ControlPort;
use crate::control_path::ControlPath;
use crate::error::{BarrierError, BootstrapError, NodeError};
use crate::sync_region::{DIR_SLOT, SyncRegion};

/// What each rank tells each peer at the rendezvous.
#[derive(Serialize, Deserialize)]
struct PeerInfo {
    link: Link,
    sync: RemoteMemoryRegion,
    /// Where the rank's control port listens (reconnects).
    control: SocketAddr,
}

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
}

/// Builds a [`Node`].
#[derive(Debug, Clone)]
pub struct NodeBuilder {
    rank: usize,
    world_size: usize,
    rendezvous: String,
    token: Option<(String, TokenSource)>,
    launcher: Option<Launcher>,
    port_file: Option<std::path::PathBuf>,
    bootstrap_timeout: Duration,
    algorithm: BarrierAlgorithm,
    channel: ChannelBuilder,
    verbs: backend::VerbsSettings,
    backend: Option<Backend>,
}

impl NodeBuilder {
    /// A node of rank `rank` in a world of `world_size`, meeting at rank
    /// 0's `rendezvous` (`host:port`; rank 0 listens on exactly that
    /// address when it is an IP address, and port 0 lets the OS pick). The
    /// job token is `FERROVIA_JOB_TOKEN` unless [`NodeBuilder::token`] sets
    /// one; without either, `build` fails.
    pub fn new(rank: usize, world_size: usize, rendezvous: impl Into<String>) -> NodeBuilder {
        NodeBuilder {
            rank,
            world_size,
            rendezvous: rendezvous.into(),
            token: std::env::var("FERROVIA_JOB_TOKEN")
                .ok()
                .filter(|t| !t.is_empty())
                .map(|t| (t, TokenSource::Explicit)),
            launcher: None,
            port_file: None,
            bootstrap_timeout: Duration::from_secs(60),
            algorithm: BarrierAlgorithm::default(),
            channel: ChannelBuilder::default(),
            verbs: backend::default_verbs_settings(),
            backend: None,
        }
    }

    /// The transport (default: `FERROVIA_BACKEND`, else verbs when a
    /// device with an active port opens, else UCX).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = Some(backend);
        self
    }

    /// From a launcher's configuration.
    pub fn from_launch(info: &LaunchInfo) -> NodeBuilder {
        let mut b = NodeBuilder::new(info.rank, info.world_size, info.rendezvous.clone());
        b.token = Some((info.token.clone(), info.token_source));
        b.launcher = Some(info.launcher);
        b.port_file = info.port_file.clone();
        b
    }

    /// [`Node::from_env_or_launch`] with settings: the builder of this
    /// rank, from the launcher's environment; or, with no launcher (a
    /// plain `cargo run`), this process starts `ranks` copies of itself as
    /// one job and exits with their status instead of returning.
    ///
    /// ```no_run
    /// use ferrovia_channel::ChannelBuilder;
    /// use ferrovia_node::NodeBuilder;
    ///
    /// # fn main() -> Result<(), ferrovia_node::NodeError> {
    /// let node = NodeBuilder::from_env_or_launch(4)?
    ///     .channel(ChannelBuilder::default().shared_receives(64))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_env_or_launch(ranks: usize) -> Result<NodeBuilder, NodeError> {
        if ranks == 0 {
            return Err(BootstrapError::NoRanks { ranks }.into());
        }
        match launcher::from_vars(&|k| std::env::var(k).ok()) {
            Ok(info) => Ok(NodeBuilder::from_launch(&info)),
            Err(BootstrapError::MissingVar {
                name: "FERROVIA_RANK",
                ..
            }) => match crate::bootstrap::local_launch::launch_here(ranks)? {},
            Err(e) => Err(e.into()),
        }
    }

    /// The job token every bootstrap connection must present (1 to 1024
    /// bytes, the same on every rank; keep it secret to keep strangers out).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some((token.into(), TokenSource::Explicit));
        self
    }

    /// Rank 0 writes the port it listens on to `path` (a line of digits,
    /// written whole): with port 0 in the rendezvous address, how a
    /// launcher learns the port the OS chose.
    pub fn report_port_to(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.port_file = Some(path.into());
        self
    }

    /// How long to wait for every rank at the rendezvous (default 60 s).
    pub fn bootstrap_timeout(mut self, t: Duration) -> Self {
        self.bootstrap_timeout = t;
        self
    }

    /// The barrier algorithm (default: dissemination).
    pub fn barrier_algorithm(mut self, a: BarrierAlgorithm) -> Self {
        self.algorithm = a;
        self
    }

    /// Channel settings (depths, timeouts, the shared pool) for the
    /// connections, whatever the backend.
    pub fn channel(mut self, channel: ChannelBuilder) -> Self {
        self.channel = channel;
        self
    }

    /// Verbs settings (device, port, limits, connection parameters) for
    /// the connections on the verbs backend (default: the first device
    /// with an active port, and transport timeouts short enough that a
    /// dead peer surfaces in well under a second).
    #[cfg(feature = "verbs")]
    pub fn verbs(mut self, verbs: ferrovia_verbs_transport::VerbsConfig) -> Self {
        self.verbs = self.verbs.with_config(verbs);
        self
    }

    /// Creates the queue pairs, meets every rank, connects, and returns
    /// once every rank is connected.
    pub fn build(self) -> Result<Node, NodeError> {
        let (rank, n) = (self.rank, self.world_size);
        if n == 0 || rank >= n {
            return Err(BootstrapError::RankOutOfRange {
                rank,
                world_size: n,
            }
            .into());
        }
        let _span = tracing::info_span!("bootstrap", rank, world_size = n).entered();
        let (job_token, token_source) = self.token.clone().ok_or_else(token::missing)?;
        token::check("job token", &job_token)?;
        let cfg = RendezvousConfig {
            rank,
            world_size: n,
            addr: self.rendezvous.clone(),
            token: job_token,
            timeout: self.bootstrap_timeout,
        };
        // Rank 0 listens first, so the others can connect while it opens
        // its transport, and a launcher that gave it port 0 learns the port.
        let listening = match rank {
            0 => Some(self.listen(&cfg, token_source)?),
            _ => None,
        };
        let explicit = match self.backend {
            Some(b) => Some(b),
            None => Backend::from_env()?,
        };
        // On the interface that reaches the rendezvous: where the peers
        // reach this rank, and all the network the transport may listen on.
        let control = ControlPort::bind(&cfg.addr)?;
        let (backend, verbs) = backend::choose(explicit, self.verbs)?;
        let channel_cfg = self.channel.config().clone();
        let opened = Opened::open(backend, self.channel, verbs.clone(), n, control.addr().ip())?;
        let description = opened.describe();
        let mut sync = SyncRegion::new(opened.registry(), n)?;
        let sync_remote = sync.exposed()?;
        let blobs = (0..n)
            .map(|j| {
                let info = PeerInfo {
                    link: opened.link(j)?,
                    sync: sync_remote,
                    control: control.addr(),
                };
                postcard::to_allocvec(&info)
                    .map_err(|e| BootstrapError::Protocol(e.to_string()).into())
            })
            .collect::<Result<Vec<_>, NodeError>>()?;
        tracing::info!(
            "rank {rank} of {n}: backend {description}, meeting at {} ({:?})",
            self.rendezvous,
            self.launcher
        );
        let (session, theirs) = match listening {
            Some(rv) => rv.exchange(&cfg, blobs)?,
            None => rendezvous::exchange(&cfg, blobs)?,
        };
        let mut links = Vec::with_capacity(n);
        let mut controls = Vec::with_capacity(n);
        for (j, blob) in theirs.iter().enumerate() {
            let info: PeerInfo = postcard::from_bytes(blob).map_err(|e| {
                BootstrapError::Protocol(format!("rank {j}'s connection info: {e}"))
            })?;
            links.push(info.link);
            sync.remote.push(info.sync);
            controls.push(info.control);
        }
        let connecting = tracing::debug_span!("connect", backend = %description).entered();
        let (multi, renewer) = opened.connect(rank, links)?;
        drop(connecting);
        session.ready()?;
        tracing::info!("rank {rank} of {n}: connected to every rank");
        Ok(Node {
            rank,
            world_size: n,
            backend,
            description,
            multi,
            sync,
            barrier: RefCell::new(RankState::new(rank, n)),
            algorithm: self.algorithm,
            launcher: self.launcher,
            renewer,
            channel: channel_cfg,
            verbs,
            control: ControlPath::new(cfg.token, control, controls),
        })
    }
}

impl NodeBuilder {
    /// Rank 0's listening rendezvous, its port reported if asked.
    fn listen(&self, cfg: &RendezvousConfig, source: TokenSource) -> Result<Rendezvous, NodeError> {
        let rv = Rendezvous::bind(cfg)?;
        let at = rv.local_addr();
        token::warn_if_public(source, at);
        if let Some(path) = &self.port_file {
            // Whole or not at all: the reader polls for the file.
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, format!("{}\n", at.port()))
                .and_then(|()| std::fs::rename(&tmp, path))
                .map_err(|e| BootstrapError::Io {
                    what: format!("report the rendezvous port to {}", path.display()),
                    source: e,
                })?;
        }
        Ok(rv)
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
