//! The UCX backend of a node: a UCX worker confined to where the peers
//! reach this rank, connected by the worker addresses the ranks trade;
//! and a rail's side, a worker of its own.

use std::sync::Arc;

use ferrovia_channel::transport::Transport;
use ferrovia_channel::{ChannelBuilder, ChannelConfig, MultiChannel};
use ferrovia_mr::MrRegistry;
use ferrovia_ucx::{Exposure, UcxContext, UcxTransport};

use crate::backend::{Link, RailConnected};
use crate::error::{BootstrapError, NodeError};

impl From<ferrovia_ucx::UcxError> for NodeError {
    fn from(e: ferrovia_ucx::UcxError) -> Self {
        NodeError::Transport(ferrovia_channel::TransportError::Backend(Box::new(e)))
    }
}

/// UCX is in this build: the node falls back to it where verbs fails.
pub(crate) const BUILT: bool = true;

/// A UCX transport opened for a node or one of its rails, not yet
/// connected.
struct UcxOpened {
    transport: UcxTransport,
    registry: MrRegistry,
    /// The transports in words: `shared memory: ...`, `UCX_TLS=...`.
    detail: Option<String>,
}

/// Opens a UCX context and worker confined to where peers reach this rank
/// (`reached_at`, see `ferrovia_ucx::Exposure`), with `cfg`'s depths and
/// pool; peer failure detection is off where only shared memory runs
/// (UCX 1.13's has none).
fn open(cfg: &ChannelConfig, reached_at: std::net::IpAddr) -> Result<UcxOpened, NodeError> {
    let exposure = Exposure::for_address(reached_at);
    let ctx = UcxContext::confined(exposure, &[])?;
    let builder = UcxTransport::builder().shared_receives(cfg.shared_receives);
    let (builder, detail) = if exposure.shared_memory_only(&|k| std::env::var(k).ok()) {
        // UCX 1.13's shared memory has no peer failure handling.
        let only = "shared memory: every rank on this host".to_owned();
        (builder.detect_peer_failure(false), Some(only))
    } else {
        let tls = std::env::var("UCX_TLS").ok();
        (builder, tls.map(|tls| format!("UCX_TLS={tls}")))
    };
    let builder = builder.depths(cfg.send_depth, cfg.recv_depth);
    let transport = builder.start(&ctx)?;
    let registry = MrRegistry::with_registrar(transport.registrar());
    Ok(UcxOpened {
        transport,
        registry,
        detail,
    })
}

impl UcxOpened {
    /// This worker's address, the same for every peer.
    fn link(&self) -> Link {
        Link::Ucx(self.transport.address().to_vec())
    }

    /// Connects to every rank's worker (`links`, by rank), this being the
    /// `me`th.
    fn connect(&self, me: usize, links: Vec<Link>) -> Result<(), NodeError> {
        // Every link is UCX's: the caller checked.
        let addresses: Vec<Vec<u8>> = links
            .into_iter()
            .filter_map(|l| match l {
                Link::Ucx(a) => Some(a),
                Link::Verbs(_) => None,
            })
            .collect();
        self.transport
            .connect(me, &addresses)
            .map_err(|e| BootstrapError::Connect {
                rank: me,
                peer: e.peer(),
                source: Box::new(e.into()),
            })?;
        for peer in 0..addresses.len() {
            tracing::debug!(peer, "connected (UCX endpoint made)");
        }
        Ok(())
    }
}

/// The node's UCX side, open and not yet connected.
pub(crate) struct Opened {
    opened: UcxOpened,
    channel: ChannelBuilder,
}

impl Opened {
    /// `reached_at` is the address peers reach this rank at (loopback for
    /// a one-host job), which confines where UCX listens.
    pub(crate) fn open(
        channel: ChannelBuilder,
        reached_at: std::net::IpAddr,
    ) -> Result<Opened, NodeError> {
        Ok(Opened {
            opened: open(channel.config(), reached_at)?,
            channel,
        })
    }

    pub(crate) fn registry(&self) -> &MrRegistry {
        &self.opened.registry
    }

    pub(crate) fn link(&self, _peer: usize) -> Result<Link, NodeError> {
        Ok(self.opened.link())
    }

    pub(crate) fn describe(&self) -> String {
        match &self.opened.detail {
            Some(d) => format!("ucx ({d})"),
            None => "ucx".into(),
        }
    }

    pub(crate) fn connect(self, rank: usize, links: Vec<Link>) -> Result<MultiChannel, NodeError> {
        self.opened.connect(rank, links)?;
        let UcxOpened {
            transport,
            registry,
            ..
        } = self.opened;
        let cfg = self.channel.config().clone();
        Ok(MultiChannel::over(Arc::new(transport), registry, cfg))
    }
}

/// A rail's UCX side: a worker of its own.
pub(crate) struct RailSide(UcxOpened);

impl RailSide {
    pub(crate) fn open(
        channel: &ChannelConfig,
        reached_at: std::net::IpAddr,
    ) -> Result<RailSide, NodeError> {
        Ok(RailSide(open(channel, reached_at)?))
    }

    pub(crate) fn link(&self, _peer: usize) -> Result<Link, NodeError> {
        Ok(self.0.link())
    }

    pub(crate) fn connect(
        self,
        id: u32,
        me: usize,
        links: Vec<Link>,
    ) -> Result<RailConnected, NodeError> {
        self.0.connect(me, links)?;
        let UcxOpened {
            transport,
            registry,
            detail,
        } = self.0;
        let description = match detail {
            Some(d) => format!("ucx worker {id} ({d})"),
            None => format!("ucx worker {id}"),
        };
        let transport: Arc<dyn Transport> = Arc::new(transport);
        Ok((transport, registry, description))
    }
}
