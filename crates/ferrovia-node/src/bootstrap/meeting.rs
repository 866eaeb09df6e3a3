//! The seam between a node's build and the engine its ranks meet through:
//! rank 0's rendezvous, PMIx, or a store. Each gives a control port on the
//! interface peers reach, trades the per-peer blobs, agrees that every
//! rank is connected, and leaves behind what the node keeps of it.

use std::time::Duration;

use crate::bootstrap::pmix::PmixMeeting;
use crate::bootstrap::rendezvous::{self, Rendezvous, RendezvousConfig, Session};
use crate::control::ControlPort;
use crate::error::{BootstrapError, NodeError};
use crate::membership::{Joining, Membership, StoreConfig};

/// One engine's meeting, from its start to the ready round.
pub(crate) enum Meeting {
    /// Rank 0's rendezvous (`listening` at rank 0 once bound).
    Rendezvous {
        cfg: RendezvousConfig,
        listening: Option<Rendezvous>,
        session: Option<Session>,
    },
    /// PMIx: the launcher's exchange; the token comes with the blobs.
    Pmix {
        meeting: Box<PmixMeeting>,
        token: Option<String>,
    },
    /// A store (etcd); boxed, for its client is large.
    Store(Box<Joining>),
}

/// What a node keeps of its engine after the meeting.
pub(crate) enum Kept {
    /// Nothing: rank 0's rendezvous is done.
    Nothing,
    /// The PMIx client, finalised when the node goes.
    Pmix(Box<PmixMeeting>),
    /// The membership: the lease, the watch, the events.
    Store(Box<Membership>),
}

impl Meeting {
    /// PMIx's meeting: rank and world size come from PMIx. `token`, when
    /// given, is the job's (else rank 0 makes one).
    pub(crate) fn pmix(timeout: Duration, token: Option<String>) -> Result<Meeting, NodeError> {
        Ok(Meeting::Pmix {
            meeting: Box::new(PmixMeeting::start(timeout)?),
            token,
        })
    }

    /// A store's meeting: claims `rank` in `cfg`'s job of `n`.
    pub(crate) fn store(
        cfg: &StoreConfig,
        rank: usize,
        n: usize,
        token: Option<&str>,
        timeout: Duration,
    ) -> Result<Meeting, NodeError> {
        let joining = Joining::start(cfg, rank, n, token, timeout)?;
        Ok(Meeting::Store(Box::new(joining)))
    }

    /// This rank and the world's size, as the engine says.
    pub(crate) fn who(&self) -> (usize, usize) {
        match self {
            Meeting::Rendezvous { cfg, .. } => (cfg.rank, cfg.world_size),
            Meeting::Pmix { meeting, .. } => (meeting.rank(), meeting.world_size()),
            Meeting::Store(j) => j.who(),
        }
    }

    /// This rank's control port, on the interface its peers reach it by.
    pub(crate) fn control_port(&self) -> Result<ControlPort, NodeError> {
        Ok(match self {
            Meeting::Rendezvous { cfg, .. } => ControlPort::bind(&cfg.addr)?,
            Meeting::Pmix { meeting, .. } => ControlPort::bind_ip(meeting.control_ip()?)?,
            Meeting::Store(j) => ControlPort::bind(j.endpoint())?,
        })
    }

    /// Trades `blobs` (`blobs[j]` for rank `j`): what every rank made for
    /// this one.
    pub(crate) fn exchange(&mut self, blobs: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, NodeError> {
        match self {
            Meeting::Rendezvous {
                cfg,
                listening,
                session,
            } => {
                let (s, theirs) = match listening.take() {
                    Some(rv) => rv.exchange(cfg, blobs)?,
                    None => rendezvous::exchange(cfg, blobs)?,
                };
                *session = Some(s);
                Ok(theirs)
            }
            Meeting::Pmix { meeting, token } => {
                let (theirs, t) = meeting.exchange(token.as_deref(), blobs)?;
                *token = Some(t);
                Ok(theirs)
            }
            Meeting::Store(j) => j.exchange(blobs),
        }
    }

    /// The job token the control path shows (after the exchange).
    pub(crate) fn token(&self) -> String {
        match self {
            Meeting::Rendezvous { cfg, .. } => cfg.token.clone(),
            Meeting::Pmix { token, .. } => token.clone().unwrap_or_default(),
            Meeting::Store(j) => j.token().to_owned(),
        }
    }

    /// The ready round: nobody returns before every rank connected.
    pub(crate) fn ready(self) -> Result<Kept, NodeError> {
        match self {
            Meeting::Rendezvous { session, .. } => {
                session
                    .ok_or_else(|| BootstrapError::Protocol("ready before the exchange".into()))?
                    .ready()?;
                Ok(Kept::Nothing)
            }
            Meeting::Pmix { meeting, .. } => {
                meeting.ready()?;
                Ok(Kept::Pmix(meeting))
            }
            Meeting::Store(j) => Ok(Kept::Store(Box::new(j.ready()?))),
        }
    }
}
