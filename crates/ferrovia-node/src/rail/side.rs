//! One rank's side of a rail, on the node's backend: open it (a verbs
//! transport on a device's own protection domain, or a UCX worker of its
//! own), say what each peer needs (its `Link`), connect. The backends'
//! halves live in `backend`; this picks one by the rail's spec.

use crate::backend::{Link, RailConnected, UcxRailSide, VerbsRailSide};
use crate::backend_name::Backend;
use crate::error::{NodeError, RailError};
use crate::node::Node;
use crate::rail::RailSpec;

/// A rail's transport opened on this rank, not yet connected.
// A backend this build lacks is an empty stand-in; with both, the sizes
// do not matter (one per rail, briefly).
#[allow(clippy::large_enum_variant)]
pub(super) enum Side {
    Verbs(VerbsRailSide),
    Ucx(UcxRailSide),
}

/// A rail's transport connected to every rank: transport, registry,
/// description.
pub(super) type Connected = RailConnected;

impl Side {
    /// Opens rail `id`'s side as `spec` says, on the node's backend.
    pub(super) fn open(node: &Node, id: u32, spec: &RailSpec) -> Result<Side, NodeError> {
        let backend = node.backend;
        let verbs = |device| {
            VerbsRailSide::open(
                id,
                device,
                &node.multi,
                &node.channel,
                &node.verbs,
                node.world_size,
            )
        };
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
            (Backend::Verbs, RailSpec::Device(device)) => verbs(Some(device)).map(Side::Verbs),
            (Backend::Verbs, RailSpec::Same) => verbs(None).map(Side::Verbs),
            (Backend::Ucx, RailSpec::Worker | RailSpec::Same) => {
                UcxRailSide::open(&node.channel, node.control.port.addr().ip())
                    .map(Side::Ucx)
                    .map_err(|e| RailError::failed(id, e))
            }
        }
    }

    /// What rank `peer` needs from this side.
    pub(super) fn link(&self, peer: usize) -> Result<Link, NodeError> {
        match self {
            Side::Verbs(s) => s.link(peer),
            Side::Ucx(s) => s.link(peer),
        }
    }

    /// The backend of this side's links.
    pub(super) fn backend(&self) -> Backend {
        match self {
            Side::Verbs(_) => Backend::Verbs,
            Side::Ucx(_) => Backend::Ucx,
        }
    }

    /// Connects to every rank (`links[j]` from rank `j`, of this side's
    /// backend: the caller checked), this rank being the `me`th.
    pub(super) fn connect(
        self,
        id: u32,
        me: usize,
        links: Vec<Link>,
    ) -> Result<Connected, NodeError> {
        match self {
            Side::Verbs(s) => s.connect(me, links),
            Side::Ucx(s) => s.connect(id, me, links),
        }
    }
}
