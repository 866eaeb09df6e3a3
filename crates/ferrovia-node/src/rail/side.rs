//! One rank's side of a rail on each backend: open it (a verbs transport
//! on a device's own protection domain, or a UCX worker of its own), say
//! what each peer needs (its `Link`), connect.

use std::sync::Arc;

use ferrovia_channel::Transport;
#[cfg(feature = "verbs")]
use ferrovia_channel::VerbsTransport;
use ferrovia_mr::MrRegistry;
#[cfg(feature = "verbs")]
use ferrovia_verbs::{Context, ProtectionDomain};

use crate::backend::{Backend, Link};
use crate::error::{BootstrapError, NodeError, RailError};
use crate::node::Node;
use crate::rail::RailSpec;

/// A rail's transport opened on this rank, not yet connected.
pub(super) enum Side {
    #[cfg(feature = "verbs")]
    Verbs {
        transport: VerbsTransport,
        registry: MrRegistry,
        device: String,
    },
    #[cfg(feature = "ucx")]
    Ucx(crate::backend::UcxOpened),
}

/// A rail's transport connected to every rank: transport, registry,
/// description.
pub(super) type Connected = (Arc<dyn Transport>, MrRegistry, String);

impl Side {
    /// Opens rail `id`'s side as `spec` says, on the node's backend.
    pub(super) fn open(node: &Node, id: u32, spec: &RailSpec) -> Result<Side, NodeError> {
        let backend = node.backend;
        match (backend, spec) {
            (Backend::Verbs, RailSpec::Worker) => {
                Err(RailError::NoWorkers { rail: id, backend }.into())
            }
            (Backend::Ucx, RailSpec::Device(device)) => Err(RailError::NoDevices {
                rail: id,
                backend,
                device: device.clone(),
            }
            .into()),
            #[cfg(feature = "verbs")]
            (Backend::Verbs, RailSpec::Device(device)) => open_verbs(node, id, Some(device)),
            #[cfg(feature = "verbs")]
            (Backend::Verbs, RailSpec::Same) => open_verbs(node, id, None),
            #[cfg(feature = "ucx")]
            (Backend::Ucx, RailSpec::Worker | RailSpec::Same) => {
                let opened = crate::backend::open_ucx(&node.channel, node.control.port.addr().ip())
                    .map_err(|e| failed(id, e))?;
                Ok(Side::Ucx(opened))
            }
            // A node runs only on a backend this build has.
            #[allow(unreachable_patterns)]
            (b, _) => Err(failed(
                id,
                BootstrapError::Protocol(format!("this build has no {b} backend")).into(),
            )),
        }
    }

    /// What rank `peer` needs from this side.
    #[cfg_attr(not(feature = "verbs"), allow(unused_variables))]
    pub(super) fn link(&self, peer: usize) -> Result<Link, NodeError> {
        match self {
            #[cfg(feature = "verbs")]
            Side::Verbs { transport, .. } => crate::backend::link_of(&transport.endpoint(peer)?),
            #[cfg(feature = "ucx")]
            Side::Ucx(opened) => Ok(Link::Ucx(opened.transport.address().to_vec())),
        }
    }

    /// The backend of this side's links.
    pub(super) fn backend(&self) -> Backend {
        match self {
            #[cfg(feature = "verbs")]
            Side::Verbs { .. } => Backend::Verbs,
            #[cfg(feature = "ucx")]
            Side::Ucx(_) => Backend::Ucx,
        }
    }

    /// Connects to every rank (`links[j]` from rank `j`, of this side's
    /// backend: the caller checked), this rank being the `me`th.
    #[cfg_attr(not(feature = "ucx"), allow(unused_variables))]
    pub(super) fn connect(
        self,
        id: u32,
        me: usize,
        links: Vec<Link>,
    ) -> Result<Connected, NodeError> {
        let connect_error = |peer: Option<usize>, e: NodeError| BootstrapError::Connect {
            rank: me,
            peer,
            source: Box::new(e),
        };
        match self {
            #[cfg(feature = "verbs")]
            Side::Verbs {
                transport,
                registry,
                device,
            } => {
                for (j, l) in links.into_iter().enumerate() {
                    if let Link::Verbs(bytes) = l {
                        let ep = crate::backend::endpoint_of(j, &bytes)?;
                        transport
                            .connect(j, &ep)
                            .map_err(|e| connect_error(Some(j), e.into()))?;
                    }
                }
                let transport: Arc<dyn Transport> = Arc::new(transport);
                Ok((transport, registry, format!("verbs on {device}")))
            }
            #[cfg(feature = "ucx")]
            Side::Ucx(opened) => {
                let addresses = Link::ucx_addresses(links);
                let crate::backend::UcxOpened {
                    transport,
                    registry,
                    detail,
                } = opened;
                transport
                    .connect(me, &addresses)
                    .map_err(|e| connect_error(e.peer(), e.into()))?;
                let description = match detail {
                    Some(d) => format!("ucx worker {id} ({d})"),
                    None => format!("ucx worker {id}"),
                };
                let transport: Arc<dyn Transport> = Arc::new(transport);
                Ok((transport, registry, description))
            }
        }
    }
}

/// `e`, as rail `id`'s.
pub(super) fn failed(id: u32, e: NodeError) -> NodeError {
    RailError::Failed {
        rail: id,
        source: Box::new(e),
    }
    .into()
}

/// A verbs side on `device` (its first active port), or on the node's own
/// device and port; in a protection domain of its own either way, so the
/// rail's registry registers for it alone.
#[cfg(feature = "verbs")]
fn open_verbs(node: &Node, id: u32, device: Option<&String>) -> Result<Side, NodeError> {
    let mut cfg = node.channel.clone();
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
        None => match node.multi.pd() {
            Some(pd) => pd.context(),
            None => {
                return Err(failed(
                    id,
                    BootstrapError::Protocol("the node's verbs channel has no device".into())
                        .into(),
                ));
            }
        },
    };
    let pd = ProtectionDomain::new(&ctx).map_err(|e| failed(id, e.into()))?;
    let transport =
        VerbsTransport::new(&pd, node.world_size, &cfg).map_err(|e| failed(id, e.into()))?;
    Ok(Side::Verbs {
        transport,
        registry: MrRegistry::new(&pd),
        device: ctx.name().to_owned(),
    })
}
