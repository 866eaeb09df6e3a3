//! Which transport a node runs on, and the per-backend steps of building
//! one: open, describe this rank's side for each peer, connect. Each
//! backend lives in its own module (`verbs`, `ucx`), which alone asks
//! whether the build has it; this one dispatches between them.

use std::sync::Arc;

use ferrovia_channel::transport::Transport;
use ferrovia_channel::{ChannelBuilder, MultiChannel};
use ferrovia_mr::MrRegistry;
use serde::{Deserialize, Serialize};

use crate::backend_name::Backend;
use crate::error::{BootstrapError, NodeError};

mod ucx;
mod verbs;

pub(crate) use ucx::RailSide as UcxRailSide;
pub(crate) use verbs::DatagramSide as VerbsDatagramSide;
pub(crate) use verbs::RailSide as VerbsRailSide;
pub(crate) use verbs::{Settings as VerbsSettings, default_settings as default_verbs_settings};

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

/// A rail's transport connected to every rank: transport, registry,
/// description.
pub(crate) type RailConnected = (Arc<dyn Transport>, MrRegistry, String);

/// Picks the backend: `explicit`, else verbs when a device with an active
/// port opens (its protection domain kept in `verbs`), else UCX.
/// An `info` log says why UCX was chosen (no device, libibverbs missing,
/// or a build without verbs).
pub(crate) fn choose(
    explicit: Option<Backend>,
    verbs: VerbsSettings,
) -> Result<(Backend, VerbsSettings), NodeError> {
    if let Some(b) = explicit {
        return Ok((b, verbs));
    }
    let mut verbs = verbs;
    match verbs::with_device(&mut verbs) {
        Ok(()) => Ok((Backend::Verbs, verbs)),
        Err(e) if ucx::BUILT => {
            tracing::info!("verbs is not usable here ({e}); using UCX");
            Ok((Backend::Ucx, verbs))
        }
        Err(e) => Err(e),
    }
}

/// A node's transport opened but not yet connected.
// One lives briefly per node build; the sizes do not matter (and a
// backend this build lacks is an empty stand-in).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Opened {
    Verbs(verbs::Opened),
    Ucx(ucx::Opened),
}

impl Opened {
    /// Opens `backend` for `n` ranks; `reached_at` is the address peers
    /// reach this rank at (loopback for a one-host job), which confines
    /// where UCX listens (`ferrovia_ucx::Exposure`).
    pub(crate) fn open(
        backend: Backend,
        channel: ChannelBuilder,
        verbs: VerbsSettings,
        n: usize,
        reached_at: std::net::IpAddr,
    ) -> Result<Opened, NodeError> {
        Ok(match backend {
            Backend::Verbs => Opened::Verbs(verbs::Opened::open(channel, verbs, n)?),
            Backend::Ucx => Opened::Ucx(ucx::Opened::open(channel, reached_at)?),
        })
    }

    pub(crate) fn registry(&self) -> &MrRegistry {
        match self {
            Opened::Verbs(o) => o.registry(),
            Opened::Ucx(o) => o.registry(),
        }
    }

    /// What peer `peer` needs from this rank.
    pub(crate) fn link(&self, peer: usize) -> Result<Link, NodeError> {
        match self {
            Opened::Verbs(o) => o.link(peer),
            Opened::Ucx(o) => o.link(peer),
        }
    }

    /// For logs and `Node::describe`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Opened::Verbs(o) => o.describe(),
            Opened::Ucx(o) => o.describe(),
        }
    }

    /// Connects to every rank (`links[j]` from rank `j`).
    pub(crate) fn connect(
        self,
        rank: usize,
        links: Vec<Link>,
    ) -> Result<(MultiChannel, Renewer), NodeError> {
        let mine = match &self {
            Opened::Verbs(_) => Backend::Verbs,
            Opened::Ucx(_) => Backend::Ucx,
        };
        if let Some((j, theirs)) = Link::first_other(&links, mine) {
            return Err(BootstrapError::Protocol(format!(
                "rank {j} runs the {theirs} backend and rank {rank} {mine}: set FERROVIA_BACKEND the same on every rank"
            ))
            .into());
        }
        let multi = match self {
            Opened::Verbs(o) => o.connect(rank, links)?,
            Opened::Ucx(o) => o.connect(rank, links)?,
        };
        Ok((multi, Renewer(mine)))
    }
}

/// What a node keeps of its backend to replace one connection
/// ([`Node::reconnect`](crate::Node::reconnect)): which backend's links
/// it trades. Both backends renew through the transport seam
/// (`MultiChannel::renew` / `connect_renewed`: verbs, a fresh
/// queue pair and its endpoint; UCX, a fresh endpoint generation).
pub(crate) struct Renewer(Backend);

impl Renewer {
    /// Replaces this side of the connection to `peer` with a fresh one;
    /// what the peer needs to connect to it (a postcard [`Link`]).
    pub(crate) fn renew(
        &self,
        multi: &mut MultiChannel,
        peer: usize,
    ) -> Result<Vec<u8>, NodeError> {
        let renewed = multi.renew(peer)?;
        let link = match self.0 {
            Backend::Verbs => Link::Verbs(renewed),
            Backend::Ucx => Link::Ucx(renewed),
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
        self.connect_moved(multi, peer, link, None)
    }

    /// [`Renewer::connect`] to a new process that took the peer's rank,
    /// whose bootstrap link is `moved`: over UCX, the new endpoint goes to
    /// its worker (the renewed link carries a generation only); a verbs
    /// renewed link names the new queue pair itself.
    pub(crate) fn connect_moved(
        &self,
        multi: &mut MultiChannel,
        peer: usize,
        link: &[u8],
        moved: Option<&Link>,
    ) -> Result<(), NodeError> {
        let link: Link = postcard::from_bytes(link).map_err(protocol)?;
        match (self.0, link) {
            (Backend::Ucx, Link::Ucx(mut bytes)) => {
                if let Some(Link::Ucx(worker)) = moved {
                    bytes.extend_from_slice(worker);
                }
                Ok(multi.connect_renewed(peer, &bytes)?)
            }
            (Backend::Verbs, Link::Verbs(bytes)) => Ok(multi.connect_renewed(peer, &bytes)?),
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
        let e = "tcp".parse::<Backend>().unwrap_err();
        assert_eq!(e.0, "tcp");
        assert!(matches!(
            BootstrapError::from(e),
            BootstrapError::MalformedVar { .. }
        ));
        assert_eq!(Backend::Ucx.to_string(), "ucx");
    }
}
