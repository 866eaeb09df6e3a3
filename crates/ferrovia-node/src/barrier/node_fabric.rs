//! The barrier's [`Fabric`] over a `Node`: RDMA writes from the source
//! words of the sync region into peers' exposed regions, atomic loads of
//! this rank's own.

use std::time::{Duration, Instant};

use ferrovia_channel::{
    Gather, PeerWriteWorkRequest, PollingScope, ScopeTarget, ScopedPendingWork, TransportError,
    WriteWorkRequest,
};

use super::engine::{Fabric, Landed};
use crate::node::Node;

/// One barrier's view of the node: the scope it posts on, and its signal
/// writes.
pub(super) struct NodeFabric<'s, 'scope, 'env> {
    s: &'s mut PollingScope<'scope, 'env, Node>,
    writes: Vec<(usize, ScopedPendingWork<'scope, 'env>)>,
    origin: Instant,
}

impl<'s, 'scope, 'env> NodeFabric<'s, 'scope, 'env> {
    pub(super) fn new(s: &'s mut PollingScope<'scope, 'env, Node>) -> Self {
        NodeFabric {
            s,
            writes: Vec::new(),
            origin: Instant::now(),
        }
    }

    /// Posts a write of source bytes `src_at..+8` into `to`'s exposed
    /// region at `dst_at`.
    fn write(
        &mut self,
        to: usize,
        src_at: usize,
        dst_at: u64,
    ) -> Result<ScopedPendingWork<'scope, 'env>, TransportError> {
        let node: &'env Node = self.s.target();
        let sync = node.sync();
        let g = [Gather::range(&sync.src, src_at..src_at + 8)?];
        let dst = sync
            .remote
            .get(to)
            .ok_or(TransportError::NoSuchPeer {
                peer: to,
                count: sync.remote.len(),
            })?
            .sub_region(dst_at, 8)?;
        self.s.post_write(PeerWriteWorkRequest::new(
            to,
            WriteWorkRequest::new(&g, dst)?,
        ))
    }

    fn node(&self) -> &'env Node {
        self.s.target()
    }
}

impl Fabric for NodeFabric<'_, '_, '_> {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn signal(&mut self, to: usize, slot: usize, word: u64) -> Result<(), TransportError> {
        let node = self.node();
        let (at, offset) = node.sync().stage_signal(node.rank(), to, slot, word)?;
        let h = self.write(to, at, offset)?;
        self.writes.push((to, h));
        Ok(())
    }

    fn signal_slot(&self, from: usize, slot: usize) -> u64 {
        self.node().sync().signal_word(from, slot)
    }

    fn send_query(&mut self, to: usize, id: u64) {
        let node = self.node();
        if let Some((at, offset)) = node.sync().stage_query(node.rank(), id) {
            // Best effort: a rank that cannot be asked does not answer.
            let _ = self.write(to, at, offset);
        }
    }

    fn query_slot(&self, from: usize) -> u64 {
        self.node().sync().query_word(from)
    }

    fn send_answer(&mut self, to: usize, word: u64) {
        let node = self.node();
        if let Some((at, offset)) = node.sync().stage_answer(node.rank(), to, word) {
            // Best effort: a rank that cannot be answered is gone.
            let _ = self.write(to, at, offset);
        }
    }

    fn answer_slot(&self, from: usize) -> u64 {
        self.node().sync().answer_word(from)
    }

    fn abandon(&mut self, to: usize, slot: usize, word: u64, reason: u64) {
        let node = self.node();
        let me = node.rank();
        // Best effort, like a query: the barrier has failed already.
        if let Some((at, offset)) = node.sync().stage_reason(me, to, reason) {
            let _ = self.write(to, at, offset);
        }
        if let Some((at, offset)) = node.sync().stage_abandon(me, to, slot, word) {
            let _ = self.write(to, at, offset);
        }
    }

    fn reason_slot(&self, from: usize) -> u64 {
        self.node().sync().reason_word(from)
    }

    fn is_broken(&self, peer: usize) -> bool {
        self.node().core().is_broken(peer)
    }

    fn give_up(&mut self, peer: usize) {
        let _ = self.node().core().flush_peer(peer);
    }

    fn progress(&mut self) -> Result<(), TransportError> {
        self.s.progress().map(drop)
    }

    fn landed(&mut self) -> Landed {
        while let Some((to, h)) = self.writes.last_mut() {
            match h.poll() {
                Ok(Some(_)) => drop(self.writes.pop()),
                Ok(None) => return Landed::Waiting(*to),
                Err(_) => return Landed::Failed(*to),
            }
        }
        Landed::All
    }
}
