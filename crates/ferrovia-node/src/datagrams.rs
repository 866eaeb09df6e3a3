//! Datagrams between the ranks of a job ([`Node::open_datagrams`]): each
//! rank opens its side (verbs: a UD queue pair in the node's protection
//! domain; UCX: a worker of its own whose channel has a shared receive
//! pool), the ranks trade their addresses and limits through rank 0's
//! control port (the rendezvous' rounds and bounds), and every rank sends
//! with the smallest limit of all, so a message one rank may send every
//! rank may receive.

use std::time::Duration;

use ferrovia_channel::{ChannelDatagrams, Datagrams, MultiChannel};
use serde::{Deserialize, Serialize};

use crate::backend::{Link, UcxRailSide, VerbsDatagramSide};
use crate::backend_name::Backend;
use crate::bootstrap::wire::{MAX_REASON, truncate};
use crate::error::{BootstrapError, NodeError};
use crate::node::Node;

/// How a node's datagrams are made ([`Node::open_datagrams_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DatagramConfig {
    /// This rank's largest message (default 4096); the job's limit is the
    /// smallest of every rank's, and on verbs of every port's MTU too.
    pub max_message: usize,
    /// Receives kept posted (default 256). On verbs, messages arriving
    /// while all are taken are lost (no error); over UCX they wait.
    pub receives: u32,
}

impl Default for DatagramConfig {
    fn default() -> Self {
        DatagramConfig {
            max_message: 4096,
            receives: 256,
        }
    }
}

impl DatagramConfig {
    /// Sets the `max_message` field.
    #[must_use]
    pub fn max_message(mut self, max: usize) -> Self {
        self.max_message = max;
        self
    }

    /// Sets the `receives` field.
    #[must_use]
    pub fn receives(mut self, n: u32) -> Self {
        self.receives = n;
        self
    }
}

/// What a rank tells every peer about its datagram side.
#[derive(Serialize, Deserialize)]
enum DatagramBlob {
    /// Its largest message and its address.
    Open { max: u32, link: Link },
    /// It did not open: why (at most [`MAX_REASON`] bytes).
    Failed { reason: String },
}

/// One rank's side, opened (UCX: with the config of the channel it will
/// run, its shared pool set).
// One lives briefly per open; a backend this build lacks is an empty
// stand-in, so the sizes differ by build and do not matter.
#[allow(clippy::large_enum_variant)]
enum Side {
    Verbs(VerbsDatagramSide),
    Ucx(UcxRailSide, ferrovia_channel::ChannelConfig),
}

impl Side {
    fn open(node: &Node, cfg: &DatagramConfig) -> Result<(Side, u32, Link), NodeError> {
        let max = u32::try_from(cfg.max_message).unwrap_or(u32::MAX).max(1);
        match node.backend {
            Backend::Verbs => {
                let side = VerbsDatagramSide::open(&node.multi, &node.verbs, max, cfg.receives)?;
                let (max, link) = side.link()?;
                Ok((Side::Verbs(side), max, link))
            }
            Backend::Ucx => {
                let mut channel = node.channel.clone();
                channel.shared_receives = cfg.receives.max(1);
                let side = UcxRailSide::open(&channel, node.control.port.addr().ip())?;
                let link = side.link(0)?;
                Ok((Side::Ucx(side, channel), max, link))
            }
        }
    }
}

impl Node {
    /// Opens datagrams to every rank (this rank's own included), with the
    /// defaults ([`DatagramConfig`]). Collective: every rank calls it.
    pub fn open_datagrams(&mut self, timeout: Duration) -> Result<Datagrams, NodeError> {
        self.open_datagrams_with(DatagramConfig::default(), timeout)
    }

    /// Opens datagrams to every rank: unreliable messages of at most
    /// [`Datagrams::max_message`] bytes, the smallest limit of every rank
    /// (on verbs also of every port's MTU), to any rank by index.
    /// Collective: every rank calls it, within `timeout`. A rank whose
    /// side does not open fails with its own error, and every other rank
    /// at once with one naming it.
    pub fn open_datagrams_with(
        &mut self,
        cfg: DatagramConfig,
        timeout: Duration,
    ) -> Result<Datagrams, NodeError> {
        let deadline = ferrovia_types::deadline_after(timeout);
        let n = self.world_size;
        let opened = Side::open(self, &cfg);
        let blob = match &opened {
            Ok((_, max, link)) => DatagramBlob::Open {
                max: *max,
                link: clone_link(link),
            },
            Err(e) => DatagramBlob::Failed {
                reason: truncate(&e.to_string(), MAX_REASON).to_owned(),
            },
        };
        let bytes = postcard::to_allocvec(&blob)
            .map_err(|e| BootstrapError::Protocol(format!("encode a datagram address: {e}")))?;
        let traded = self.trade(vec![bytes; n], deadline);
        let (side, _, _) = opened?;
        let (session, table) = traded?;
        let mut limit = u32::MAX;
        let mut links = Vec::with_capacity(n);
        for (rank, blob) in table.iter().enumerate() {
            match postcard::from_bytes(blob) {
                Ok(DatagramBlob::Open { max, link }) => {
                    limit = limit.min(max);
                    links.push(link);
                }
                Ok(DatagramBlob::Failed { reason }) => {
                    return Err(BootstrapError::Protocol(format!(
                        "rank {rank} could not open datagrams: {reason}"
                    ))
                    .into());
                }
                Err(e) => {
                    return Err(BootstrapError::Protocol(format!(
                        "rank {rank}'s datagram address: {e}"
                    ))
                    .into());
                }
            }
        }
        if let Some((rank, theirs)) = Link::first_other(&links, self.backend) {
            return Err(BootstrapError::Protocol(format!(
                "rank {rank} opened datagrams on {theirs}, this rank on {}",
                self.backend
            ))
            .into());
        }
        let transport = match side {
            Side::Verbs(side) => side.connect(links)?,
            Side::Ucx(side, channel) => {
                let (transport, registry, _) = side.connect(0, self.rank, links)?;
                let multi = MultiChannel::over(transport, registry, channel);
                Box::new(ChannelDatagrams::new(multi, limit as usize)?)
            }
        };
        session.ready_by(deadline)?;
        let d = Datagrams::new(transport, limit as usize);
        tracing::info!(
            "rank {} of {n}: {} to every rank, {} bytes a message",
            self.rank,
            d.describe(),
            d.max_message()
        );
        Ok(d)
    }
}

fn clone_link(link: &Link) -> Link {
    match link {
        Link::Verbs(b) => Link::Verbs(b.clone()),
        Link::Ucx(b) => Link::Ucx(b.clone()),
    }
}
