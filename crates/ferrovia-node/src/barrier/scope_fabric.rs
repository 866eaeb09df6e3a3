//! The barrier's [`Fabric`] over a polling scope of a rank (a [`Member`]:
//! the node): RDMA writes from the source words of the sync region into
//! peers' exposed regions, atomic loads of this rank's own.

use std::time::{Duration, Instant};

use ferrovia_channel::{
    Gather, MultiPeer, PeerWriteWorkRequest, PollingScope, ScopeTarget, ScopedPendingWork,
    TransportError, WriteWorkRequest,
};

use std::cell::RefCell;

use super::BarrierAlgorithm;
use super::engine::{Fabric, Landed, RankState};
use crate::sync_region::SyncRegion;

/// What a barrier needs of the rank it runs on: the node implements it,
/// so the barrier names no node.
pub(crate) trait Member: ScopeTarget + MultiPeer {
    /// This rank.
    fn rank(&self) -> usize;
    /// The exposed words the barrier's signals land in.
    fn sync(&self) -> &SyncRegion;
    /// Pair counts and query bookkeeping.
    fn barrier_state(&self) -> &RefCell<RankState>;
    /// How the ranks meet.
    fn algorithm(&self) -> BarrierAlgorithm;
}

/// One barrier's view of the rank: the scope it posts on, its signal
/// writes, and its best-effort ones (queries, answers, abandons), kept so
/// a failed barrier can settle them (see [`ScopeFabric::settle`]).
pub(super) struct ScopeFabric<'s, 'scope, 'env, M: Member> {
    s: &'s mut PollingScope<'scope, 'env, M>,
    writes: Vec<(usize, ScopedPendingWork<'scope, 'env>)>,
    best_effort: Vec<(usize, ScopedPendingWork<'scope, 'env>)>,
    origin: Instant,
}

impl<'s, 'scope, 'env, M: Member> ScopeFabric<'s, 'scope, 'env, M> {
    pub(super) fn new(s: &'s mut PollingScope<'scope, 'env, M>) -> Self {
        ScopeFabric {
            s,
            writes: Vec::new(),
            best_effort: Vec::new(),
            origin: Instant::now(),
        }
    }

    /// A best-effort write: its failure is not the barrier's, but it is
    /// settled with the rest if the barrier fails.
    fn write_best_effort(&mut self, to: usize, src_at: usize, dst_at: u64) {
        if let Ok(h) = self.write(to, src_at, dst_at) {
            self.best_effort.push((to, h));
        }
    }

    /// After a failed barrier: waits up to `within` for this barrier's
    /// writes, then gives up on (flushes) the peers whose writes are still
    /// outstanding, as a verdict gives up on peers that do not answer. A
    /// live peer acknowledges a write in well under the query window;
    /// without this, a failed barrier's writes to a dead rank (an abandon
    /// heard from another rank names it, but this rank's own connection
    /// looks sound) held the scope's drain to its 10 s deadline on verbs,
    /// where such writes retry for longer than that.
    pub(super) fn settle(&mut self, within: Duration) {
        let until = ferrovia_types::deadline_after(within);
        loop {
            let _ = self.s.progress();
            for list in [&mut self.writes, &mut self.best_effort] {
                list.retain_mut(|(_, h)| matches!(h.poll(), Ok(None)));
            }
            if self.writes.is_empty() && self.best_effort.is_empty() {
                return;
            }
            if Instant::now() >= until {
                let mut stuck: Vec<usize> = self
                    .writes
                    .iter()
                    .chain(&self.best_effort)
                    .map(|(p, _)| *p)
                    .collect();
                stuck.sort_unstable();
                stuck.dedup();
                for p in stuck {
                    tracing::warn!(
                        "barrier failed; its writes to rank {p} did not complete within {within:?}: flushing that connection"
                    );
                    self.give_up(p);
                }
                return;
            }
            std::thread::yield_now();
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
        let node: &'env M = self.s.target();
        let sync = node.sync();
        let g = [Gather::range(&sync.src, src_at..src_at + 8)?];
        let dst = sync.peer_word(to, dst_at)?;
        self.s.post_write(PeerWriteWorkRequest::new(
            to,
            WriteWorkRequest::new(&g, dst)?,
        ))
    }

    fn node(&self) -> &'env M {
        self.s.target()
    }
}

impl<M: Member> Fabric for ScopeFabric<'_, '_, '_, M> {
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
            self.write_best_effort(to, at, offset);
        }
    }

    fn query_slot(&self, from: usize) -> u64 {
        self.node().sync().query_word(from)
    }

    fn send_answer(&mut self, to: usize, word: u64) {
        let node = self.node();
        if let Some((at, offset)) = node.sync().stage_answer(node.rank(), to, word) {
            // Best effort: a rank that cannot be answered is gone.
            self.write_best_effort(to, at, offset);
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
            self.write_best_effort(to, at, offset);
        }
        if let Some((at, offset)) = node.sync().stage_abandon(me, to, slot, word) {
            self.write_best_effort(to, at, offset);
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
