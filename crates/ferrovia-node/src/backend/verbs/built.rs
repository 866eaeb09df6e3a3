//! The verbs backend of a node: a multi-channel of RC queue pairs on the
//! device the channel settings name (else the first with an active port),
//! connected by the endpoints the ranks trade; and a rail's side, a
//! verbs transport in a protection domain of its own.

use std::sync::Arc;

use ferrovia_channel::DatagramTransport;
use ferrovia_channel::transport::Transport;
use ferrovia_channel::{ChannelBuilder, ChannelConfig, MultiChannel, TransportError};
use ferrovia_mr::MrRegistry;
use ferrovia_verbs::DatagramAddress;
use ferrovia_verbs::{ConnectOptions, Context, Endpoint, ProtectionDomain};
use ferrovia_verbs_transport::{
    DatagramOptions, VerbsBuilder, VerbsConfig, VerbsDatagrams, VerbsMultiChannel, VerbsTransport,
    registry,
};

use crate::backend::{Link, RailConnected};
use crate::error::{BootstrapError, NodeError, RailError};

impl From<ferrovia_verbs::VerbsError> for NodeError {
    fn from(e: ferrovia_verbs::VerbsError) -> Self {
        NodeError::Transport(TransportError::Backend(Box::new(e)))
    }
}

/// A node's verbs settings: the verbs ones (`NodeBuilder::verbs`) and,
/// once the node picked verbs, its device's protection domain.
pub(crate) type Settings = VerbsBuilder;

/// The node's default: short transport timeouts, so a dead peer surfaces
/// in well under a second (4.096 µs × 2^12 ≈ 17 ms per try, 7 retries).
pub(crate) fn default_settings() -> Settings {
    let mut verbs = VerbsConfig::default();
    verbs.connect = ConnectOptions::default().timeout(12);
    VerbsBuilder::default().with_config(verbs)
}

/// Opens the protection domain of the settings' device, if one opens.
pub(crate) fn with_device(settings: &mut Settings) -> Result<(), NodeError> {
    *settings = std::mem::take(settings).open_device()?;
    Ok(())
}

/// Rank `rank`'s verbs endpoint, from its link's bytes.
fn endpoint_of(rank: usize, bytes: &[u8]) -> Result<Endpoint, NodeError> {
    postcard::from_bytes(bytes).map_err(|e| {
        BootstrapError::Protocol(format!("rank {rank} sent a bad endpoint: {e}")).into()
    })
}

/// A verbs endpoint as a link.
fn link_of(endpoint: &Endpoint) -> Result<Link, NodeError> {
    Ok(Link::Verbs(postcard::to_allocvec(endpoint).map_err(
        |e| BootstrapError::Protocol(format!("cannot encode an endpoint: {e}")),
    )?))
}

/// Connects, through `connect`, to the endpoint in each rank's link.
fn connect_all(
    me: usize,
    links: Vec<Link>,
    mut connect: impl FnMut(usize, &Endpoint) -> Result<(), NodeError>,
) -> Result<(), NodeError> {
    for (j, l) in links.into_iter().enumerate() {
        if let Link::Verbs(bytes) = l {
            let ep = endpoint_of(j, &bytes)?;
            connect(j, &ep).map_err(|e| BootstrapError::Connect {
                rank: me,
                peer: Some(j),
                source: Box::new(e),
            })?;
            tracing::debug!(peer = j, "connected (queue pair ready to send)");
        }
    }
    Ok(())
}

/// The node's verbs side, open and not yet connected.
pub(crate) struct Opened(MultiChannel);

impl Opened {
    pub(crate) fn open(
        channel: ChannelBuilder,
        settings: Settings,
        n: usize,
    ) -> Result<Opened, NodeError> {
        Ok(Opened(settings.channel(channel).build_multi(n)?))
    }

    pub(crate) fn registry(&self) -> &MrRegistry {
        self.0.registry()
    }

    /// What peer `peer` needs from this rank: its queue pair's endpoint.
    pub(crate) fn link(&self, peer: usize) -> Result<Link, NodeError> {
        link_of(&self.0.endpoint(peer)?)
    }

    pub(crate) fn describe(&self) -> String {
        let device = self.0.pd().map(|pd| pd.context().name().to_owned());
        format!("verbs on {}", device.as_deref().unwrap_or("?"))
    }

    /// Connects every queue pair to its rank's endpoint.
    pub(crate) fn connect(self, rank: usize, links: Vec<Link>) -> Result<MultiChannel, NodeError> {
        let mut m = self.0;
        connect_all(rank, links, |j, ep| Ok(m.connect(j, ep)?))?;
        Ok(m)
    }
}

/// A rail's verbs side: a transport for every rank in a protection
/// domain of its own, so the rail's registry registers for it alone.
pub(crate) struct RailSide {
    transport: VerbsTransport,
    registry: MrRegistry,
    device: String,
}

impl RailSide {
    /// Rail `id` on `device` (its first active port), or on the node's
    /// own device (`node`'s) and port.
    pub(crate) fn open(
        id: u32,
        device: Option<&String>,
        node: &MultiChannel,
        channel: &ChannelConfig,
        settings: &Settings,
        world_size: usize,
    ) -> Result<RailSide, NodeError> {
        let mut cfg = settings.config().clone();
        let ctx = match device {
            Some(name) => {
                let ctx = Context::open(name).map_err(|e| RailError::NoSuchDevice {
                    rail: id,
                    device: name.clone(),
                    reason: e.to_string(),
                })?;
                let port = ctx.active_port().map_err(|e| RailError::NoActivePort {
                    rail: id,
                    device: name.clone(),
                    reason: e.to_string(),
                })?;
                // The node's port setting names a port of its own device.
                cfg.device = Some(name.clone());
                cfg.port = Some(port.port);
                ctx
            }
            None => match node.pd() {
                Some(pd) => pd.context(),
                None => {
                    return Err(RailError::failed(
                        id,
                        BootstrapError::Protocol("the node's verbs channel has no device".into())
                            .into(),
                    ));
                }
            },
        };
        let pd = ProtectionDomain::new(&ctx).map_err(|e| RailError::failed(id, e.into()))?;
        let transport = VerbsTransport::new(&pd, world_size, channel, &cfg)
            .map_err(|e| RailError::failed(id, e.into()))?;
        Ok(RailSide {
            transport,
            registry: registry(&pd),
            device: ctx.name().to_owned(),
        })
    }

    pub(crate) fn link(&self, peer: usize) -> Result<Link, NodeError> {
        link_of(&self.transport.endpoint(peer)?)
    }

    pub(crate) fn connect(self, me: usize, links: Vec<Link>) -> Result<RailConnected, NodeError> {
        let t = &self.transport;
        connect_all(me, links, |j, ep| Ok(t.connect(j, ep)?))?;
        let transport: Arc<dyn Transport> = Arc::new(self.transport);
        Ok((
            transport,
            self.registry,
            format!("verbs on {}", self.device),
        ))
    }
}

/// A node's datagram side on verbs: a UD queue pair in the node's
/// protection domain, on its port.
pub(crate) struct DatagramSide(VerbsDatagrams);

impl DatagramSide {
    /// Opens it with at most `max_message` bytes a message (the port's MTU
    /// may say less) and `receives` receives posted.
    pub(crate) fn open(
        node: &MultiChannel,
        settings: &Settings,
        max_message: u32,
        receives: u32,
    ) -> Result<DatagramSide, NodeError> {
        let Some(pd) = node.pd() else {
            return Err(
                BootstrapError::Protocol("the node's verbs channel has no device".into()).into(),
            );
        };
        let mut opts = DatagramOptions::default()
            .max_message(max_message)
            .receives(receives);
        opts.port = settings.config().port;
        opts.post_path = settings.config().post_path;
        Ok(DatagramSide(VerbsDatagrams::open(pd, &opts)?))
    }

    /// Its largest message and the link every peer gets (its address).
    pub(crate) fn link(&self) -> Result<(u32, Link), NodeError> {
        let addr = self.0.address();
        let bytes = postcard::to_allocvec(&addr).map_err(|e| {
            BootstrapError::Protocol(format!("cannot encode a datagram address: {e}"))
        })?;
        Ok((addr.max_message, Link::Verbs(bytes)))
    }

    /// Makes the route to every rank (`links[j]` from rank `j`).
    pub(crate) fn connect(
        mut self,
        links: Vec<Link>,
    ) -> Result<Box<dyn DatagramTransport>, NodeError> {
        let addrs = links
            .into_iter()
            .enumerate()
            .map(|(rank, l)| match l {
                Link::Verbs(bytes) => {
                    postcard::from_bytes::<DatagramAddress>(&bytes).map_err(|e| {
                        BootstrapError::Protocol(format!(
                            "rank {rank} sent a bad datagram address: {e}"
                        ))
                        .into()
                    })
                }
                Link::Ucx(_) => Err(BootstrapError::Protocol(format!(
                    "rank {rank} opened datagrams on UCX"
                ))
                .into()),
            })
            .collect::<Result<Vec<_>, NodeError>>()?;
        self.0.connect(&addrs)?;
        Ok(Box::new(self.0))
    }
}
