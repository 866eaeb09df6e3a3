//! Which transport a node runs on, and the per-backend steps of building
//! one: open, describe this rank's side for each peer, connect.

use std::str::FromStr;
#[cfg(feature = "ucx")]
use std::sync::Arc;

use ferrovia_channel::{ChannelBuilder, MultiChannel};
use ferrovia_mr::MrRegistry;
#[cfg(feature = "verbs")]
use ferrovia_verbs::{Context, Endpoint, ProtectionDomain};
use serde::{Deserialize, Serialize};

use crate::error::{BootstrapError, NodeError};

/// Which transport a node runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// libibverbs RC queue pairs (InfiniBand, RoCE, soft-RoCE).
    Verbs,
    /// UCX (tcp, shared memory, or UCX's own RDMA transports): where no
    /// RDMA device is usable. Needs the `ucx` feature (on by default).
    Ucx,
}

impl Backend {
    /// `"verbs"` or `"ucx"`, as `FERROVIA_BACKEND` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Verbs => "verbs",
            Backend::Ucx => "ucx",
        }
    }

    /// `FERROVIA_BACKEND`, if set.
    pub fn from_env() -> Result<Option<Backend>, BootstrapError> {
        match std::env::var("FERROVIA_BACKEND") {
            Ok(v) if !v.is_empty() => v.parse().map(Some),
            _ => Ok(None),
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = BootstrapError;

    fn from_str(s: &str) -> Result<Backend, BootstrapError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "verbs" | "ibverbs" | "rdma" => Ok(Backend::Verbs),
            "ucx" => Ok(Backend::Ucx),
            _ => Err(BootstrapError::MalformedVar {
                name: "FERROVIA_BACKEND".into(),
                value: s.into(),
                reason: "expected verbs or ucx".into(),
            }),
        }
    }
}

/// What one rank tells a peer so the peer can connect to it. Both
/// variants exist in every build, so a rank built without a backend still
/// reads a peer's link and says which backend that peer runs.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Link {
    /// The queue pair made for that peer (an `Endpoint`, postcard-encoded).
    Verbs(Vec<u8>),
    /// The UCX worker address (the same for every peer).
    Ucx(Vec<u8>),
}

impl Link {
    pub(crate) fn backend(&self) -> Backend {
        match self {
            Link::Verbs(_) => Backend::Verbs,
            Link::Ucx(_) => Backend::Ucx,
        }
    }

    /// The UCX worker addresses among `links` (by rank; verbs links are
    /// left out, since a caller checked that there are none).
    #[cfg(feature = "ucx")]
    pub(crate) fn ucx_addresses(links: Vec<Link>) -> Vec<Vec<u8>> {
        links
            .into_iter()
            .filter_map(|l| match l {
                Link::Ucx(a) => Some(a),
                Link::Verbs(_) => None,
            })
            .collect()
    }

    /// The first rank whose link is of another backend than `mine`, with
    /// its backend.
    pub(crate) fn first_other(links: &[Link], mine: Backend) -> Option<(usize, Backend)> {
        links
            .iter()
            .enumerate()
            .find(|(_, l)| l.backend() != mine)
            .map(|(j, l)| (j, l.backend()))
    }
}

/// Rank `rank`'s verbs endpoint, from its link's bytes.
#[cfg(feature = "verbs")]
pub(crate) fn endpoint_of(rank: usize, bytes: &[u8]) -> Result<Endpoint, NodeError> {
    postcard::from_bytes(bytes).map_err(|e| {
        BootstrapError::Protocol(format!("rank {rank} sent a bad endpoint: {e}")).into()
    })
}

/// A verbs endpoint as a link's bytes.
#[cfg(feature = "verbs")]
pub(crate) fn link_of(endpoint: &Endpoint) -> Result<Link, NodeError> {
    Ok(Link::Verbs(postcard::to_allocvec(endpoint).map_err(
        |e| BootstrapError::Protocol(format!("cannot encode an endpoint: {e}")),
    )?))
}

/// A UCX transport opened for a node or one of its rails, not yet
/// connected.
#[cfg(feature = "ucx")]
pub(crate) struct UcxOpened {
    pub(crate) transport: ferrovia_ucx::UcxTransport,
    pub(crate) registry: MrRegistry,
    /// The transports in words: `shared memory: ...`, `UCX_TLS=...`.
    pub(crate) detail: Option<String>,
}

/// Opens a UCX context and worker confined to where peers reach this rank
/// (`reached_at`, see `ferrovia_ucx::Exposure`), with `cfg`'s depths and
/// pool; peer failure detection is off where only shared memory runs
/// (UCX 1.13's has none). The node and each of its UCX rails open one.
#[cfg(feature = "ucx")]
pub(crate) fn open_ucx(
    cfg: &ferrovia_channel::ChannelConfig,
    reached_at: std::net::IpAddr,
) -> Result<UcxOpened, NodeError> {
    let exposure = ferrovia_ucx::Exposure::for_address(reached_at);
    let ctx = ferrovia_ucx::UcxContext::confined(exposure, &[])?;
    let mut builder = ferrovia_ucx::UcxTransport::builder().shared_receives(cfg.shared_receives);
    let detail = if exposure.shared_memory_only(&|k| std::env::var(k).ok()) {
        // UCX 1.13's shared memory has no peer failure handling.
        builder = builder.detect_peer_failure(false);
        Some("shared memory: every rank on this host".to_owned())
    } else {
        std::env::var("UCX_TLS")
            .ok()
            .map(|tls| format!("UCX_TLS={tls}"))
    };
    #[cfg(feature = "verbs")]
    {
        builder = builder.depths(cfg.caps.max_send_wr, cfg.caps.max_recv_wr);
    }
    let transport = builder.start(&ctx)?;
    let registry = MrRegistry::with_registrar(transport.registrar());
    Ok(UcxOpened {
        transport,
        registry,
        detail,
    })
}

/// Picks the backend: `explicit`, else verbs when a device with an active
/// port opens (handing its protection domain to the channel), else UCX.
/// An `info` log says why UCX was chosen (no device, libibverbs missing,
/// or a build without verbs).
pub(crate) fn choose(
    explicit: Option<Backend>,
    channel: ChannelBuilder,
) -> Result<(Backend, ChannelBuilder), NodeError> {
    if let Some(b) = explicit {
        return Ok((b, channel));
    }
    #[cfg(feature = "verbs")]
    {
        let cfg = channel.config();
        let opened = match &cfg.device {
            Some(name) => Context::open(name),
            None => Context::open_default(),
        };
        match opened.and_then(|ctx| ProtectionDomain::new(&ctx)) {
            Ok(pd) => Ok((Backend::Verbs, channel.pd(&pd))),
            Err(e) if cfg!(feature = "ucx") => {
                log::info!("no usable RDMA device ({e}); using UCX");
                Ok((Backend::Ucx, channel))
            }
            Err(e) => Err(e.into()),
        }
    }
    #[cfg(not(feature = "verbs"))]
    {
        log::info!("ferrovia-node was built without the verbs backend; using UCX");
        Ok((Backend::Ucx, channel))
    }
}

/// The error for a backend this build does not have.
#[cfg(not(all(feature = "verbs", feature = "ucx")))]
fn not_built(backend: Backend) -> NodeError {
    BootstrapError::Protocol(format!(
        "the {backend} backend was asked for, but ferrovia-node was built without its `{backend}` feature"
    ))
    .into()
}

/// A transport opened but not yet connected.
// One lives briefly per node build; the sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Opened {
    #[cfg(feature = "verbs")]
    Verbs(MultiChannel),
    #[cfg(feature = "ucx")]
    Ucx {
        opened: UcxOpened,
        channel: ChannelBuilder,
    },
}

impl Opened {
    /// Opens `backend` for `n` ranks; `reached_at` is the address peers
    /// reach this rank at (loopback for a one-host job), which confines
    /// where UCX listens (`ferrovia_ucx::Exposure`).
    #[cfg_attr(not(feature = "verbs"), allow(unused_variables))]
    #[cfg_attr(not(feature = "ucx"), allow(unused_variables))]
    pub(crate) fn open(
        backend: Backend,
        channel: ChannelBuilder,
        n: usize,
        reached_at: std::net::IpAddr,
    ) -> Result<Opened, NodeError> {
        match backend {
            #[cfg(feature = "verbs")]
            Backend::Verbs => Ok(Opened::Verbs(channel.build_multi(n)?)),
            #[cfg(not(feature = "verbs"))]
            Backend::Verbs => Err(not_built(backend)),
            #[cfg(feature = "ucx")]
            Backend::Ucx => Ok(Opened::Ucx {
                opened: open_ucx(channel.config(), reached_at)?,
                channel,
            }),
            #[cfg(not(feature = "ucx"))]
            Backend::Ucx => Err(not_built(backend)),
        }
    }

    pub(crate) fn registry(&self) -> &MrRegistry {
        match self {
            #[cfg(feature = "verbs")]
            Opened::Verbs(m) => m.registry(),
            #[cfg(feature = "ucx")]
            Opened::Ucx { opened, .. } => &opened.registry,
        }
    }

    /// What peer `peer` needs from this rank.
    #[cfg_attr(not(feature = "verbs"), allow(unused_variables))]
    pub(crate) fn link(&self, peer: usize) -> Result<Link, NodeError> {
        match self {
            #[cfg(feature = "verbs")]
            Opened::Verbs(m) => link_of(&m.endpoint(peer)?),
            #[cfg(feature = "ucx")]
            Opened::Ucx { opened, .. } => Ok(Link::Ucx(opened.transport.address().to_vec())),
        }
    }

    /// For logs and `Node::describe`.
    pub(crate) fn describe(&self) -> String {
        match self {
            #[cfg(feature = "verbs")]
            Opened::Verbs(m) => format!(
                "verbs on {}",
                m.pd()
                    .map_or_else(|| "?".into(), |pd| pd.context().name().to_owned())
            ),
            #[cfg(feature = "ucx")]
            Opened::Ucx { opened, .. } => match &opened.detail {
                Some(d) => format!("ucx ({d})"),
                None => "ucx".into(),
            },
        }
    }

    /// Connects to every rank (`links[j]` from rank `j`).
    pub(crate) fn connect(
        self,
        rank: usize,
        links: Vec<Link>,
    ) -> Result<(MultiChannel, Renewer), NodeError> {
        let mine = match &self {
            #[cfg(feature = "verbs")]
            Opened::Verbs(_) => Backend::Verbs,
            #[cfg(feature = "ucx")]
            Opened::Ucx { .. } => Backend::Ucx,
        };
        if let Some((j, theirs)) = Link::first_other(&links, mine) {
            return Err(BootstrapError::Protocol(format!(
                "rank {j} runs the {theirs} backend and rank {rank} {mine}: set FERROVIA_BACKEND the same on every rank"
            ))
            .into());
        }
        match self {
            #[cfg(feature = "verbs")]
            Opened::Verbs(mut m) => {
                for (j, l) in links.into_iter().enumerate() {
                    if let Link::Verbs(bytes) = l {
                        let ep = endpoint_of(j, &bytes)?;
                        m.connect(j, &ep).map_err(|e| BootstrapError::Connect {
                            rank,
                            peer: Some(j),
                            source: Box::new(e.into()),
                        })?;
                    }
                }
                Ok((m, Renewer::Verbs))
            }
            #[cfg(feature = "ucx")]
            Opened::Ucx { opened, channel } => {
                let UcxOpened {
                    transport,
                    registry,
                    ..
                } = opened;
                let addresses = Link::ucx_addresses(links);
                transport
                    .connect(rank, &addresses)
                    .map_err(|e| BootstrapError::Connect {
                        rank,
                        peer: e.peer(),
                        source: Box::new(e.into()),
                    })?;
                Ok((
                    MultiChannel::over(Arc::new(transport), registry, channel.config().clone()),
                    Renewer::Ucx,
                ))
            }
        }
    }
}

/// What a node keeps of its backend to replace one connection
/// ([`Node::reconnect`](crate::Node::reconnect)).
pub(crate) enum Renewer {
    #[cfg(feature = "verbs")]
    Verbs,
    #[cfg(feature = "ucx")]
    Ucx,
}

impl Renewer {
    /// Replaces this side of the connection to `peer` with a fresh one;
    /// what the peer needs to connect to it (a postcard [`Link`]).
    pub(crate) fn renew(
        &self,
        multi: &mut MultiChannel,
        peer: usize,
    ) -> Result<Vec<u8>, NodeError> {
        let link = match self {
            #[cfg(feature = "verbs")]
            Renewer::Verbs => {
                let ep = multi.renew(peer)?;
                Link::Verbs(postcard::to_allocvec(&ep).map_err(protocol)?)
            }
            #[cfg(feature = "ucx")]
            Renewer::Ucx => Link::Ucx(multi.renew_transport(peer)?),
        };
        postcard::to_allocvec(&link).map_err(protocol)
    }

    /// Connects the renewed side to the peer's renewed side `link`.
    pub(crate) fn connect(
        &self,
        multi: &mut MultiChannel,
        peer: usize,
        link: &[u8],
    ) -> Result<(), NodeError> {
        let link: Link = postcard::from_bytes(link).map_err(protocol)?;
        match (self, link) {
            #[cfg(feature = "verbs")]
            (Renewer::Verbs, Link::Verbs(bytes)) => {
                let ep: Endpoint = postcard::from_bytes(&bytes).map_err(protocol)?;
                Ok(multi.connect(peer, &ep)?)
            }
            #[cfg(feature = "ucx")]
            (Renewer::Ucx, Link::Ucx(bytes)) => Ok(multi.connect_renewed(peer, &bytes)?),
            (_, other) => Err(BootstrapError::Protocol(format!(
                "rank {peer} renewed its side on the {} backend",
                other.backend()
            ))
            .into()),
        }
    }
}

fn protocol(e: postcard::Error) -> NodeError {
    BootstrapError::Protocol(format!("a renewed link: {e}")).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names_parse() {
        assert_eq!("verbs".parse::<Backend>().unwrap(), Backend::Verbs);
        assert_eq!(" UCX ".parse::<Backend>().unwrap(), Backend::Ucx);
        assert!(matches!(
            "tcp".parse::<Backend>(),
            Err(BootstrapError::MalformedVar { .. })
        ));
        assert_eq!(Backend::Ucx.to_string(), "ucx");
    }
}
