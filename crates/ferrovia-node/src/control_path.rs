//! The control path of a node: the job token, every rank's control port
//! and this rank's, and each connection's generation. Reconnects
//! (`reconnect`) and rails agree with a peer over it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrovia_channel::TransportError;

use crate::control::{ControlPort, Handshake};
use crate::error::{BootstrapError, NodeError};

/// What a node keeps to agree with a peer on a new connection, and to
/// trade a rail's links: the token, every rank's control port, this
/// rank's, and the generations.
pub(crate) struct ControlPath {
    /// The job token, which a reconnecting peer shows.
    pub(crate) token: String,
    pub(crate) port: ControlPort,
    /// Every rank's control port.
    pub(crate) controls: Vec<SocketAddr>,
    /// Per link, per peer: the connection's generation, how many
    /// reconnects of it succeeded (a reconnect names the one it
    /// replaces). A link absent here has never been reconnected.
    generations: BTreeMap<u32, Vec<u32>>,
    /// This rank's member and every rank's, in a store-backed job (the
    /// store revision that created the member's key; 0 elsewhere): a
    /// knock from another member of the peer's rank than the one known
    /// (a dead one's, say) is a stranger's.
    incarnation: u64,
    incarnations: Vec<u64>,
}

impl ControlPath {
    pub(crate) fn new(token: String, port: ControlPort, controls: Vec<SocketAddr>) -> ControlPath {
        let n = controls.len();
        ControlPath {
            token,
            port,
            controls,
            generations: BTreeMap::new(),
            incarnation: 0,
            incarnations: vec![0; n],
        }
    }

    /// The members' incarnations of a store-backed job: this rank's and
    /// every rank's.
    pub(crate) fn set_incarnations(&mut self, mine: u64, all: Vec<u64>) {
        self.incarnation = mine;
        if all.len() == self.incarnations.len() {
            self.incarnations = all;
        }
    }

    /// A new member took `peer`'s rank: its incarnation, its control
    /// port, and every connection with it starting again at generation 0
    /// (the new member's count).
    pub(crate) fn replace_peer(&mut self, peer: usize, incarnation: u64, control: SocketAddr) {
        if let (Some(i), Some(c)) = (self.incarnations.get_mut(peer), self.controls.get_mut(peer)) {
            *i = incarnation;
            *c = control;
        }
        for g in self.generations.values_mut() {
            if let Some(g) = g.get_mut(peer) {
                *g = 0;
            }
        }
    }

    fn ranks(&self) -> usize {
        self.controls.len()
    }

    /// The generation of `link` with `peer` (`None` for a peer out of
    /// range).
    pub(crate) fn generation(&self, link: u32, peer: usize) -> Option<u32> {
        (peer < self.ranks()).then(|| {
            self.generations
                .get(&link)
                .map_or(0, |g| g.get(peer).copied().unwrap_or(0))
        })
    }

    /// A new connection on `link` (a rail opened again): generation 0 with
    /// every peer.
    pub(crate) fn restart(&mut self, link: u32) {
        self.generations.remove(&link);
    }

    fn generations(&mut self, link: u32) -> &mut Vec<u32> {
        let n = self.ranks();
        self.generations.entry(link).or_insert_with(|| vec![0; n])
    }

    /// Replaces `link`'s connection with `peer` (see
    /// [`Node::reconnect_with`]): `renew` this side, trade the bytes with
    /// the peer's renewed side, `connect`. `state` is what both closures
    /// change, so each may borrow it mutably in turn.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn agree<S>(
        &mut self,
        me: usize,
        link: u32,
        peer: usize,
        timeout: Duration,
        state: &mut S,
        renew: impl FnOnce(&mut S) -> Result<Vec<u8>, NodeError>,
        connect: impl FnOnce(&mut S, Vec<u8>) -> Result<(), NodeError>,
    ) -> Result<(), NodeError> {
        let dials = me < peer;
        self.agree_as(me, link, peer, timeout, dials, state, renew, connect)
    }

    /// [`ControlPath::agree`], this side dialing (`dials`) or answering
    /// whatever the ranks: a new member of a rank dials every survivor in
    /// turn, and each survivor answers only it, so no survivor's knock
    /// meets the newcomer busy with another.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn agree_as<S>(
        &mut self,
        me: usize,
        link: u32,
        peer: usize,
        timeout: Duration,
        dials: bool,
        state: &mut S,
        renew: impl FnOnce(&mut S) -> Result<Vec<u8>, NodeError>,
        connect: impl FnOnce(&mut S, Vec<u8>) -> Result<(), NodeError>,
    ) -> Result<(), NodeError> {
        let started = Instant::now();
        let deadline = started
            .checked_add(timeout)
            .unwrap_or_else(|| ferrovia_types::deadline_after(timeout));
        let generation = self.generation(link, peer);
        let _span = tracing::info_span!("reconnect", rank = me, link, peer, generation).entered();
        tracing::info!("reconnecting");
        let r = self.try_agree(me, link, peer, deadline, dials, state, renew, connect);
        match &r {
            Ok(()) => tracing::info!(
                took_us = started.elapsed().as_micros() as u64,
                generation = self.generation(link, peer),
                "reconnected"
            ),
            Err(e) => tracing::warn!(
                took_us = started.elapsed().as_micros() as u64,
                "reconnect failed: {e}"
            ),
        }
        r.map_err(|e| NodeError::Reconnect {
            peer,
            link,
            after: started.elapsed(),
            source: Box::new(e),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn try_agree<S>(
        &mut self,
        me: usize,
        link: u32,
        peer: usize,
        deadline: Instant,
        dials: bool,
        state: &mut S,
        renew: impl FnOnce(&mut S) -> Result<Vec<u8>, NodeError>,
        connect: impl FnOnce(&mut S, Vec<u8>) -> Result<(), NodeError>,
    ) -> Result<(), NodeError> {
        let count = self.ranks();
        if peer >= count {
            return Err(TransportError::NoSuchPeer { peer, count }.into());
        }
        let generation = self.generations(link)[peer];
        let mine = renew(state)?;
        let connect = |theirs: Vec<u8>| connect(state, theirs);
        if peer == me {
            connect(mine)?; // loopback: our own other side
            self.generations(link)[peer] = generation.wrapping_add(1);
            return Ok(());
        }
        let h = Handshake {
            token: &self.token,
            me,
            peer,
            deadline,
            link,
            generation,
            incarnation: self.incarnation,
            peer_incarnation: self.incarnations[peer],
        };
        let r = if dials {
            h.dial(self.controls[peer], mine, connect)
        } else {
            h.answer(&self.port, mine, connect)
        };
        match &r {
            Ok(()) => self.generations(link)[peer] = generation.wrapping_add(1),
            Err(NodeError::Bootstrap(BootstrapError::ReconnectMismatch { theirs, .. })) => {
                // Both sides count the larger one from now on, so their
                // next calls meet.
                self.generations(link)[peer] = generation.max(*theirs);
            }
            Err(_) => {}
        }
        r
    }
}
