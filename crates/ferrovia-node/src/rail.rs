//! Rails: more connections from every rank to every rank, each set on a
//! backend of its own (an RDMA device, or a UCX worker), opened by the
//! node for layers that spread transfers over several
//! ([`Node::open_rail`]).
//!
//! Opening is collective. Each rank opens its side (`side`), then the
//! ranks trade what each peer needs (a verbs endpoint per peer, or the
//! worker's address) through rank 0's control port, in the bootstrap's
//! rounds and with its bounds (`rendezvous`): the job token first, sizes
//! checked, everything within the caller's deadline. A rank whose side did
//! not open still takes part, with a "failed" marker saying why in place of
//! its links, so every rank fails at once naming it rather than at its
//! deadline. Then each connects, and a ready round makes sure every rank
//! is connected before any returns.

mod side;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrovia_channel::transport::Transport;
use ferrovia_mr::MrRegistry;
use serde::{Deserialize, Serialize};

use crate::backend::Link;
use crate::backend_name::Backend;
use crate::bootstrap::rendezvous::{self, Rendezvous, RendezvousConfig, Session};
use crate::bootstrap::wire::{MAX_REASON, truncate};
use crate::error::{BootstrapError, NodeError, RailError};
use crate::node::Node;
use side::Side;

/// What backend a rail runs on ([`Node::open_rail`]). Each rank names its
/// own: the ranks of a job may name different devices.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RailSpec {
    /// Verbs: this RDMA device (e.g. `"rxe1"`), on its first active port,
    /// in a protection domain of its own. A UCX node has no devices to
    /// name ([`RailError::NoDevices`]).
    Device(String),
    /// UCX: a worker of its own, with its own progress thread, on the
    /// node's UCX configuration (the same confinement of where UCX may
    /// listen, depths and peer failure detection). A verbs node has no
    /// workers ([`RailError::NoWorkers`]).
    Worker,
    /// The node's own backend: verbs on the node's device and port (a
    /// protection domain of its own), or a new UCX worker.
    Same,
}

/// One connection from this rank to every rank of the job (peer index =
/// rank, this rank's own in loopback, as the node's own connections), on a
/// backend of its own: what [`Node::open_rail`] returns.
///
/// The transport is connected and nothing drives it yet: hand it to one
/// channel core, a [`MultiChannel::over`](ferrovia_channel::MultiChannel::over)
/// or a composite transport over several rails, which polls it; never poll
/// it directly from the program as well (two pollers would take each
/// other's completions). Memory for it is registered with
/// [`Rail::registry`]: on verbs in the rail's own protection domain, on UCX
/// with its worker's own registrar; a registration of the node's registry
/// (or another rail's) does not work on it.
///
/// ```no_run
/// use std::time::Duration;
/// use ferrovia_channel::{ChannelConfig, MultiChannel};
/// use ferrovia_node::{Node, NodeError, RailSpec};
///
/// # fn main() -> Result<(), NodeError> {
/// let mut node = Node::from_env()?;
/// // Every rank, in the same order; rail 1 on a second device if it has one.
/// let zero = node.open_rail(0, RailSpec::Same, Duration::from_secs(30))?;
/// let spec = match std::env::var("RAIL1_DEVICE") {
///     Ok(device) => RailSpec::Device(device),
///     Err(_) => RailSpec::Same,
/// };
/// let one = node.open_rail(1, spec, Duration::from_secs(30))?;
/// println!("{} and {}", zero.describe(), one.describe());
/// let mut channels: Vec<MultiChannel> = [zero, one]
///     .into_iter()
///     .map(|rail| {
///         let (transport, registry) = rail.into_parts();
///         MultiChannel::over(transport, registry, ChannelConfig::default())
///     })
///     .collect();
/// # let _ = &mut channels;
/// # Ok(())
/// # }
/// ```
pub struct Rail {
    id: u32,
    transport: Arc<dyn Transport>,
    registry: MrRegistry,
    description: String,
}

impl std::fmt::Debug for Rail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rail")
            .field("id", &self.id)
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

impl Rail {
    /// The transport, connected to every rank (peer index = rank). Drive
    /// it from one channel core only (see [`Rail`]).
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }

    /// Registers memory for this rail's transport.
    pub fn registry(&self) -> &MrRegistry {
        &self.registry
    }

    /// The id it was opened with; its link for
    /// [`Node::reconnect_with`] is this + 1.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The link that names this rail's connections in
    /// [`Node::reconnect_with`] (its id + 1: link 0 is the node's own).
    pub fn link(&self) -> u32 {
        self.id + 1
    }

    /// The backend in words, e.g. `verbs on rxe1` or `ucx worker 2
    /// (UCX_TLS=tcp)`.
    pub fn describe(&self) -> &str {
        &self.description
    }

    /// The transport and the registry, e.g. for
    /// [`MultiChannel::over`](ferrovia_channel::MultiChannel::over).
    pub fn into_parts(self) -> (Arc<dyn Transport>, MrRegistry) {
        (self.transport, self.registry)
    }
}

/// What a rank tells each peer about its side of a rail.
#[derive(Serialize, Deserialize)]
enum RailBlob {
    /// Its side, for that peer.
    Open { rail: u32, link: Link },
    /// Its side did not open: why (at most [`MAX_REASON`] bytes).
    Failed { rail: u32, reason: String },
}

impl Node {
    /// Opens rail `id`: a connection from this rank to every rank (its own
    /// in loopback), on a backend of its own as `spec` says, connected.
    ///
    /// Collective: every rank calls it with the same `id`, rails in the
    /// same order (each rank's `spec` may name its own device). Each rank
    /// opens its side (verbs: a transport on the device's own protection
    /// domain with the node's channel settings; UCX: a new context and
    /// worker with the node's depths and failure detection), the ranks
    /// trade their links through rank 0's control port (the job token
    /// shown, sizes bounded), every rank connects, and it returns once
    /// every rank is connected, or fails within `timeout`.
    ///
    /// A side that does not open is this rank's typed error
    /// ([`RailError::NoSuchDevice`], [`RailError::NoActivePort`],
    /// [`RailError::NoDevices`], ...), returned once the ranks have traded:
    /// the others learn of it in the trade and fail at once with
    /// [`RailError::PeerFailed`] naming this rank. A rank opening another
    /// rail is [`RailError::IdMismatch`] everywhere; one on another
    /// backend, [`RailError::BackendMismatch`]. Opening an `id` again makes
    /// a new rail, whose link starts at generation 0.
    ///
    /// Nothing of the node's own connections changes, and a rail's
    /// connection is replaced with [`Node::reconnect_with`] on its
    /// [`Rail::link`].
    pub fn open_rail(
        &mut self,
        id: u32,
        spec: RailSpec,
        timeout: Duration,
    ) -> Result<Rail, NodeError> {
        let deadline = ferrovia_types::deadline_after(timeout);
        let link = id.checked_add(1).ok_or(RailError::InvalidId { id })?;
        let (me, n) = (self.rank, self.world_size);
        let (side, blobs) = blobs_for(id, Side::open(self, id, &spec), n);
        let blobs = blobs
            .iter()
            .map(postcard::to_allocvec)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                RailError::failed(
                    id,
                    BootstrapError::Protocol(format!("encode a rail's link: {e}")).into(),
                )
            })?;
        let traded = self.trade(blobs, deadline);
        // This rank's own failure first: the peers know it from the trade.
        let side = side?;
        let (session, table) = traded.map_err(|e| RailError::failed(id, e.into()))?;
        let links = read_table(id, side.backend(), table)?;
        let (transport, registry, description) = side
            .connect(id, me, links)
            .map_err(|e| RailError::failed(id, e))?;
        session
            .ready_by(deadline)
            .map_err(|e| RailError::failed(id, e.into()))?;
        self.control.restart(link);
        tracing::info!("rank {me} of {n}: rail {id} ({description}) connected to every rank");
        Ok(Rail {
            id,
            transport,
            registry,
            description,
        })
    }

    /// Trades `blobs` (`blobs[j]` for rank `j`) through rank 0's control
    /// port by `deadline`: what every rank made for this one.
    pub(crate) fn trade(
        &self,
        blobs: Vec<Vec<u8>>,
        deadline: Instant,
    ) -> Result<(Session, Vec<Vec<u8>>), BootstrapError> {
        let cfg = RendezvousConfig {
            rank: self.rank,
            world_size: self.world_size,
            addr: self.control.controls[0].to_string(),
            token: self.control.token.clone(),
            timeout: deadline.saturating_duration_since(Instant::now()),
        };
        match self.rank {
            0 => Rendezvous::serving(self.control.port.listener()?)?.exchange(&cfg, blobs),
            _ => rendezvous::exchange(&cfg, blobs),
        }
    }
}

/// What every rank gets from this one about rail `id`: `side`'s link for
/// it, or, if the side (or any of its links) failed, the failure marker.
fn blobs_for(
    id: u32,
    side: Result<Side, NodeError>,
    n: usize,
) -> (Result<Side, NodeError>, Vec<RailBlob>) {
    let links = side.as_ref().map_err(|e| e.to_string()).and_then(|s| {
        (0..n)
            .map(|j| s.link(j))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())
    });
    match links {
        Ok(links) => {
            let blobs = links
                .into_iter()
                .map(|link| RailBlob::Open { rail: id, link })
                .collect();
            (side, blobs)
        }
        Err(why) => {
            let reason = truncate(&why, MAX_REASON).to_owned();
            let blobs = (0..n)
                .map(|_| RailBlob::Failed {
                    rail: id,
                    reason: reason.clone(),
                })
                .collect();
            (side, blobs)
        }
    }
}

/// Every rank's link for this rank (`table[j]` from rank `j`), checked:
/// the same rail, opened, on this rank's backend. The first rank that is
/// not, in rank order, is the error (every rank sees the same ones).
fn read_table(id: u32, ours: Backend, table: Vec<Vec<u8>>) -> Result<Vec<Link>, NodeError> {
    let mut links = Vec::with_capacity(table.len());
    for (rank, blob) in table.iter().enumerate() {
        let blob: RailBlob = postcard::from_bytes(blob).map_err(|e| {
            RailError::failed(
                id,
                BootstrapError::Protocol(format!("rank {rank}'s link of a rail: {e}")).into(),
            )
        })?;
        match blob {
            RailBlob::Open { rail, .. } | RailBlob::Failed { rail, .. } if rail != id => {
                return Err(RailError::IdMismatch {
                    rank,
                    ours: id,
                    theirs: rail,
                }
                .into());
            }
            RailBlob::Failed { reason, .. } => {
                return Err(RailError::PeerFailed {
                    rail: id,
                    rank,
                    reason,
                }
                .into());
            }
            RailBlob::Open { link, .. } => links.push(link),
        }
    }
    if let Some((rank, theirs)) = Link::first_other(&links, ours) {
        return Err(RailError::BackendMismatch {
            rail: id,
            rank,
            ours,
            theirs,
        }
        .into());
    }
    Ok(links)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(rail: u32, backend: Backend) -> Vec<u8> {
        let link = match backend {
            Backend::Verbs => Link::Verbs(vec![1, 2]),
            Backend::Ucx => Link::Ucx(vec![3]),
        };
        postcard::to_allocvec(&RailBlob::Open { rail, link }).unwrap()
    }

    fn failed_blob(rail: u32, reason: &str) -> Vec<u8> {
        postcard::to_allocvec(&RailBlob::Failed {
            rail,
            reason: reason.into(),
        })
        .unwrap()
    }

    #[test]
    fn a_table_of_one_rail_on_one_backend_reads() {
        let links = read_table(4, Backend::Ucx, vec![open(4, Backend::Ucx); 3]).unwrap();
        assert_eq!(links.len(), 3);
        assert!(links.iter().all(|l| l.backend() == Backend::Ucx));
    }

    #[test]
    fn a_table_names_the_first_rank_at_fault() {
        let t = vec![
            open(1, Backend::Verbs),
            failed_blob(1, "no such device"),
            open(2, Backend::Verbs),
        ];
        // The first rank at fault, in rank order.
        let e = read_table(1, Backend::Verbs, t.clone()).unwrap_err();
        assert!(
            matches!(
                e,
                NodeError::Rail(RailError::PeerFailed { rail: 1, rank: 1, ref reason })
                    if reason == "no such device"
            ),
            "{e}"
        );
        let e = read_table(1, Backend::Verbs, vec![t[0].clone(), t[2].clone()]).unwrap_err();
        assert!(
            matches!(
                e,
                NodeError::Rail(RailError::IdMismatch {
                    rank: 1,
                    ours: 1,
                    theirs: 2
                })
            ),
            "{e}"
        );
        let e =
            read_table(1, Backend::Verbs, vec![t[0].clone(), open(1, Backend::Ucx)]).unwrap_err();
        assert!(
            matches!(
                e,
                NodeError::Rail(RailError::BackendMismatch {
                    rail: 1,
                    rank: 1,
                    ours: Backend::Verbs,
                    theirs: Backend::Ucx
                })
            ),
            "{e}"
        );
        let e = read_table(1, Backend::Verbs, vec![vec![0xff; 3]]).unwrap_err();
        assert!(
            matches!(e, NodeError::Rail(RailError::Failed { rail: 1, .. })),
            "{e}"
        );
        assert!(e.to_string().contains("rank 0"), "{e}");
    }

    #[test]
    fn a_failed_side_says_why_in_every_blob_bounded() {
        let side = Err(RailError::NoSuchDevice {
            rail: 3,
            device: "x".repeat(500),
            reason: "absent".into(),
        }
        .into());
        let (side, blobs) = blobs_for(3, side, 4);
        assert!(side.is_err());
        assert_eq!(blobs.len(), 4);
        for blob in blobs {
            let RailBlob::Failed { rail: 3, reason } = blob else {
                panic!("not a failure marker");
            };
            assert!(
                reason.starts_with("rail 3: cannot open RDMA device"),
                "{reason}"
            );
            assert!(reason.len() <= MAX_REASON);
        }
    }
}
