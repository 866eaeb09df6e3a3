//! `NodeBuilder`: a node's settings, and its build: meet the other ranks
//! through the engine (rank 0's rendezvous, PMIx, a store), open the
//! transport, trade what each peer needs, connect.

use std::net::SocketAddr;
use std::time::Duration;

use ferrovia_channel::ChannelBuilder;
use ferrovia_mr::RemoteMemoryRegion;
use serde::{Deserialize, Serialize};

use crate::backend::{self, Link, Opened};
use crate::backend_name::Backend;
use crate::barrier::BarrierAlgorithm;
use crate::bootstrap::launcher::{self, Engine, LaunchInfo, Launcher};
use crate::bootstrap::meeting::Meeting;
use crate::bootstrap::rendezvous::{Rendezvous, RendezvousConfig};
use crate::bootstrap::token::{self, TokenSource};
use crate::control_path::ControlPath;
use crate::error::{BootstrapError, NodeError};
use crate::membership::StoreConfig;
use crate::node::{Assembly, Node};
use crate::sync_region::SyncRegion;

/// What each rank tells each peer when they meet.
#[derive(Serialize, Deserialize)]
pub(crate) struct PeerInfo {
    pub(crate) link: Link,
    pub(crate) sync: RemoteMemoryRegion,
    /// Where the rank's control port listens (reconnects).
    pub(crate) control: SocketAddr,
}

impl PeerInfo {
    /// What this rank tells each of the `n` ranks.
    fn blobs(
        opened: &Opened,
        sync: RemoteMemoryRegion,
        control: SocketAddr,
        n: usize,
    ) -> Result<Vec<Vec<u8>>, NodeError> {
        (0..n)
            .map(|j| {
                let info = PeerInfo {
                    link: opened.link(j)?,
                    sync,
                    control,
                };
                postcard::to_allocvec(&info)
                    .map_err(|e| BootstrapError::Protocol(e.to_string()).into())
            })
            .collect()
    }

    /// Rank `j`'s blob for this rank.
    pub(crate) fn decode(j: usize, blob: &[u8]) -> Result<PeerInfo, NodeError> {
        postcard::from_bytes(blob).map_err(|e| {
            BootstrapError::Protocol(format!("rank {j}'s connection info: {e}")).into()
        })
    }
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
    engine: Engine,
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
            engine: Engine::Rendezvous,
        }
    }

    /// A node of a job started by a PMIx launcher (`mpirun`, `srun
    /// --mpi=pmix`): rank and world size come from PMIx, and the ranks
    /// trade their endpoints through it (put, commit, fence, get). No rank
    /// 0 listens, and the job token for the control path is made by rank 0
    /// and shared through PMIx, unless [`NodeBuilder::token`] sets one.
    pub fn pmix() -> NodeBuilder {
        let mut b = NodeBuilder::new(0, 0, "");
        b.engine = Engine::Pmix;
        b
    }

    /// A node of a store-backed job (etcd, feature `etcd`): rank `rank` of
    /// `world_size`, claimed in the store (see the `membership` docs). The
    /// job token is the job's, made by its first member, unless
    /// [`NodeBuilder::token`] (or `FERROVIA_JOB_TOKEN`) sets it.
    pub fn store(config: StoreConfig, rank: usize, world_size: usize) -> NodeBuilder {
        let mut b = NodeBuilder::new(rank, world_size, config.endpoint.clone());
        b.engine = Engine::Store(config);
        b
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
        b.token = (info.token_source != TokenSource::Engine)
            .then(|| (info.token.clone(), info.token_source));
        b.engine = info.engine.clone();
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
        let explicit = match self.backend {
            Some(b) => Some(b),
            None => Backend::from_env()?,
        };
        let mut meeting = self.meet()?;
        let (rank, n) = meeting.who();
        let _span = tracing::info_span!("bootstrap", rank, world_size = n).entered();
        // On the interface that reaches the meeting place: where the peers
        // reach this rank, and all the network the transport may listen on.
        let control = meeting.control_port()?;
        let (backend, verbs) = backend::choose(explicit, self.verbs)?;
        let channel_cfg = self.channel.config().clone();
        let opened = Opened::open(backend, self.channel, verbs.clone(), n, control.addr().ip())?;
        let description = opened.describe();
        let mut sync = SyncRegion::new(opened.registry(), n)?;
        let blobs = PeerInfo::blobs(&opened, sync.exposed()?, control.addr(), n)?;
        tracing::info!(
            "rank {rank} of {n}: backend {description}, meeting through {} ({:?})",
            self.engine,
            self.launcher
        );
        let theirs = meeting.exchange(blobs)?;
        let mut links = Vec::with_capacity(n);
        let mut controls = Vec::with_capacity(n);
        for (j, blob) in theirs.iter().enumerate() {
            let info = PeerInfo::decode(j, blob)?;
            links.push(info.link);
            sync.remote.push(info.sync);
            controls.push(info.control);
        }
        let connecting = tracing::debug_span!("connect", backend = %description).entered();
        let (multi, renewer) = opened.connect(rank, links)?;
        drop(connecting);
        let token = meeting.token();
        let kept = meeting.ready()?;
        tracing::info!("rank {rank} of {n}: connected to every rank");
        let mut node = Node::assemble(Assembly {
            rank,
            world_size: n,
            backend,
            description,
            multi,
            sync,
            algorithm: self.algorithm,
            launcher: self.launcher,
            renewer,
            channel: channel_cfg,
            verbs,
            control: ControlPath::new(token, control, controls),
            engine: self.engine,
            kept,
        });
        if node.is_replacement() {
            node.rejoin(self.bootstrap_timeout)?;
        }
        Ok(node)
    }

    /// Starts the engine's meeting: who this rank is, and the token.
    fn meet(&self) -> Result<Meeting, NodeError> {
        let token = self.token.as_ref().map(|(t, _)| t.as_str());
        match &self.engine {
            Engine::Pmix => Meeting::pmix(self.bootstrap_timeout, token.map(str::to_owned)),
            Engine::Store(cfg) => {
                self.check_rank()?;
                if let Some(t) = token {
                    token::check("job token", t)?;
                }
                Meeting::store(
                    cfg,
                    self.rank,
                    self.world_size,
                    token,
                    self.bootstrap_timeout,
                )
            }
            _ => {
                self.check_rank()?;
                let (job_token, source) = self.token.clone().ok_or_else(token::missing)?;
                token::check("job token", &job_token)?;
                let cfg = RendezvousConfig {
                    rank: self.rank,
                    world_size: self.world_size,
                    addr: self.rendezvous.clone(),
                    token: job_token,
                    timeout: self.bootstrap_timeout,
                };
                // Rank 0 listens first, so the others can connect while it
                // opens its transport, and a launcher that gave it port 0
                // learns the port.
                let listening = match self.rank {
                    0 => Some(self.listen(&cfg, source)?),
                    _ => None,
                };
                Ok(Meeting::Rendezvous {
                    cfg,
                    listening,
                    session: None,
                })
            }
        }
    }

    fn check_rank(&self) -> Result<(), NodeError> {
        if self.world_size == 0 || self.rank >= self.world_size {
            return Err(BootstrapError::RankOutOfRange {
                rank: self.rank,
                world_size: self.world_size,
            }
            .into());
        }
        Ok(())
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
