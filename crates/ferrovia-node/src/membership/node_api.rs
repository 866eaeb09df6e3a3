//! What a node of a store-backed job adds: its membership events, the
//! admission of a new member into a dead one's rank (and, at a
//! replacement's build, its connection to every survivor), and values
//! published under a name. Each call on a node that did not meet through
//! a store fails with [`BootstrapError::NoStore`].

use std::time::{Duration, Instant};

use ferrovia_channel::ScopeTarget;
use ferrovia_mr::RemoteMemoryRegion;

use crate::builder::PeerInfo;
use crate::error::{BootstrapError, NodeError};
use crate::membership::{MemberEvent, Membership};
use crate::node::Node;

impl Node {
    fn membership(&self, what: &'static str) -> Result<&Membership, NodeError> {
        self.membership
            .as_deref()
            .ok_or_else(|| BootstrapError::NoStore { what }.into())
    }

    /// Whether this node replaced a dead member of a running job and has
    /// still to connect to the survivors (its build does that).
    pub(crate) fn is_replacement(&self) -> bool {
        self.membership.as_ref().is_some_and(|m| m.is_replacement())
    }

    /// The replacement's side of [`Node::admit`]: dials every other rank's
    /// control port in turn (each survivor admits this rank meanwhile,
    /// answering only it), then marks this member running.
    pub(crate) fn rejoin(&mut self, timeout: Duration) -> Result<(), NodeError> {
        let deadline = ferrovia_types::deadline_after(timeout);
        for peer in (0..self.world_size).filter(|&p| p != self.rank) {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut side = (&mut self.multi, &self.renewer);
            self.control.agree_as(
                self.rank,
                0,
                peer,
                left,
                true,
                &mut side,
                |(multi, renewer)| renewer.renew(multi, peer),
                |(multi, renewer), theirs| renewer.connect(multi, peer, &theirs),
            )?;
            tracing::info!("rank {}: connected to survivor {peer}", self.rank);
        }
        if let Some(m) = self.membership.as_mut() {
            m.set_running()?;
        }
        Ok(())
    }

    /// The next change of a store-backed job's membership, waiting at most
    /// `timeout` (`None` when nothing changed). A member that left
    /// ([`MemberEvent::Left`]) has its connection here flushed before the
    /// event is handed out, so work with it fails at once, naming it.
    pub fn next_member_event(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<MemberEvent>, NodeError> {
        let event = self
            .membership("Node::next_member_event")?
            .next_event(timeout);
        if let Some(MemberEvent::Left { rank, .. }) = &event
            && *rank != self.rank
        {
            let _ = self.multi.core().flush_peer(*rank);
        }
        Ok(event)
    }

    /// Connects to the new member of `rank` ([`MemberEvent::Joined`]):
    /// the barrier's and the directory's state with that rank start
    /// afresh, and the two agree on a new connection over the control
    /// path, as [`Node::reconnect`] does, the newcomer's incarnation
    /// checked and the connection's generation starting at 0 again. Every
    /// survivor admits the newcomer, which connects to each in turn,
    /// within `timeout`. Nothing of the dead member's connection reaches
    /// the new one: verbs uses a new queue pair, UCX a new endpoint whose
    /// generation is newer than any the dead member used.
    pub fn admit(&mut self, rank: usize, timeout: Duration) -> Result<(), NodeError> {
        if rank == self.rank || rank >= self.world_size {
            return Err(BootstrapError::NotJoined { rank }.into());
        }
        let (blob, incarnation) = self.membership("Node::admit")?.joined_blob(rank)?;
        let info = PeerInfo::decode(rank, &blob)?;
        // The dead member's connection, if no event flushed it yet.
        let _ = self.multi.core().flush_peer(rank);
        self.reset_peer_sync(rank, info.sync);
        self.control.replace_peer(rank, incarnation, info.control);
        let mut side = (&mut self.multi, &self.renewer);
        let moved = info.link;
        self.control.agree_as(
            self.rank,
            0,
            rank,
            timeout,
            false,
            &mut side,
            |(multi, renewer)| renewer.renew(multi, rank),
            |(multi, renewer), theirs| renewer.connect_moved(multi, rank, &theirs, Some(&moved)),
        )?;
        tracing::info!(
            "rank {}: admitted rank {rank} (incarnation {incarnation})",
            self.rank
        );
        Ok(())
    }

    /// This rank's member in a store-backed job: the store revision that
    /// created its key (a replacement's is newer than its predecessor's).
    pub fn incarnation(&self) -> Option<u64> {
        self.membership.as_deref().map(|m| m.incarnation())
    }

    /// Publishes `value` under `name` in the job's store, for as long as
    /// this member lives (its lease holds the key), the way NIXL's
    /// `sendLocalMD` does: any member can [`Node::fetch`] it by name,
    /// without a collective. A name is what a store key may hold after
    /// the job's prefix.
    pub fn publish(&self, name: &str, value: &[u8]) -> Result<(), NodeError> {
        self.membership("Node::publish")?
            .publish(name, value.to_vec())
    }

    /// What a member published under `name`, waiting up to `timeout` for
    /// it to appear ([`BootstrapError::NotPublished`] past that).
    pub fn fetch(&self, name: &str, timeout: Duration) -> Result<Vec<u8>, NodeError> {
        self.membership("Node::fetch")?.fetch(name, timeout)
    }

    /// [`Node::publish`] of a memory descriptor (its canonical wire form).
    pub fn publish_remote(&self, name: &str, region: &RemoteMemoryRegion) -> Result<(), NodeError> {
        let mut wire = [0u8; ferrovia_mr::WIRE_MAX_LEN];
        self.publish(name, region.encode_into(&mut wire))
    }

    /// [`Node::fetch`] of a descriptor [`Node::publish_remote`] published.
    pub fn fetch_remote(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<RemoteMemoryRegion, NodeError> {
        Ok(RemoteMemoryRegion::decode(&self.fetch(name, timeout)?)?)
    }
}
