//! Barriers made of one-sided RDMA writes: each signal writes the sender's
//! running count into a per-sender slot of the receiver, which watches the
//! slot with atomic loads. Counting per pair (not per barrier) lets any
//! subset of ranks, and any algorithm, share the same slots.
//!
//! When a wait times out the rank asks every participant, by RDMA write
//! into its query slot, how many barriers it has entered; ranks spinning
//! in a barrier answer the same way. Those that do not answer (dead,
//! unreachable, or busy elsewhere) or are behind did not arrive: they are
//! named in the error and their connections flushed, so nothing is left
//! waiting on them.

use std::thread;
use std::time::{Duration, Instant};

use ferrovia_channel::{
    Gather, PeerWriteWorkRequest, PollingScope, ScopeTarget, ScopedPendingWork, TransportError,
    WriteWorkRequest,
};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crate::error::BarrierError;
use crate::node::Node;

/// How long a timed-out rank waits for answers to its query.
const QUERY_WAIT: Duration = Duration::from_millis(500);

/// How ranks meet in a barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BarrierAlgorithm {
    /// ⌈log2 n⌉ rounds; in round k, rank i signals i+2^k and waits for
    /// i−2^k. The default.
    #[default]
    Dissemination,
    /// Everyone signals the first rank, which then releases everyone.
    Centralized,
    /// Arrivals gather up a binary tree; the release goes back down.
    BinaryTree,
}

/// Checks a barrier peer list: sorted, unique, in range, containing `me`.
pub(crate) fn validate(
    peers: &[usize],
    me: usize,
    world_size: usize,
) -> Result<usize, BarrierError> {
    let bad = |reason| {
        Err(BarrierError::InvalidPeers {
            peers: peers.to_vec(),
            rank: me,
            world_size,
            reason,
        })
    };
    if peers.windows(2).any(|w| w[0] >= w[1]) {
        return bad("ranks must be sorted and unique");
    }
    if peers.last().is_some_and(|&p| p >= world_size) {
        return bad("a rank is out of range");
    }
    match peers.binary_search(&me) {
        Ok(i) => Ok(i),
        Err(_) => bad("the list must contain this rank"),
    }
}

struct Run<'s, 'scope, 'env> {
    s: &'s mut PollingScope<'scope, 'env, Node>,
    peers: &'s [usize],
    /// This barrier's signal writes and their targets.
    writes: Vec<(usize, ScopedPendingWork<'scope, 'env>)>,
    deadline: Instant,
    timeout: Duration,
}

/// Writes word `src_at` of the source region into `to`'s flags region at
/// `dst_at`; the handle is dropped (the scope still drains it).
fn write_word(
    s: &mut PollingScope<'_, '_, Node>,
    to: usize,
    src_at: usize,
    dst_at: u64,
) -> Result<(), BarrierError> {
    let sync = s.target().sync();
    let g = [Gather::range(&sync.src, src_at..src_at + 8)?];
    let dst = sync.remote[to]
        .sub_region(dst_at, 8)
        .map_err(ferrovia_channel::TransportError::from)?;
    drop(s.post_write(PeerWriteWorkRequest::new(
        to,
        WriteWorkRequest::new(&g, dst)?,
    ))?);
    Ok(())
}

/// Answers every new query with the number of barriers entered.
fn answer_queries(s: &mut PollingScope<'_, '_, Node>) {
    let node = s.target();
    let (sync, me) = (node.sync(), node.rank());
    for r in (0..node.world_size()).filter(|&r| r != me) {
        let q = sync.flag(sync.query_offset(r)).load(Acquire);
        if q != 0 && q != sync.answered[r].get() {
            sync.answered[r].set(q);
            let (src, at) = sync.answer_src(r);
            src.store(sync.entered.get(), Release);
            // Best effort: a rank that cannot be answered is gone.
            let _ = write_word(s, r, at, sync.answer_offset(me));
        }
    }
}

impl<'scope, 'env> Run<'_, 'scope, 'env> {
    fn signal(&mut self, to: usize) -> Result<(), BarrierError> {
        let node: &'env Node = self.s.target();
        let sync = node.sync();
        let v = sync.sent[to].get() + 1;
        sync.sent[to].set(v);
        sync.src_word(to).store(v, Release);
        let g = [Gather::range(&sync.src, to * 8..to * 8 + 8)?];
        let slot = sync.remote[to]
            .sub_region(8 * node.rank() as u64, 8)
            .map_err(ferrovia_channel::TransportError::from)?;
        let h = self.s.post_write(PeerWriteWorkRequest::new(
            to,
            WriteWorkRequest::new(&g, slot)?,
        ))?;
        self.writes.push((to, h));
        Ok(())
    }

    fn wait(&mut self, from: usize) -> Result<(), BarrierError> {
        let node: &'env Node = self.s.target();
        let sync = node.sync();
        let want = sync.seen[from].get() + 1;
        let mut spins = 0u32;
        while sync.counter(from) < want {
            if Instant::now() >= self.deadline {
                return Err(self.timed_out(from));
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) {
                // Reap our own writes' completions, answer queries of
                // ranks that timed out, and let ranks sharing this CPU run.
                self.s.progress()?;
                answer_queries(self.s);
                thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        sync.seen[from].set(want);
        Ok(())
    }

    /// Asks every participant how many barriers it entered; names those
    /// that do not answer or are behind, and flushes their connections.
    fn timed_out(&mut self, waited_on: usize) -> BarrierError {
        let node = self.s.target();
        let (sync, me) = (node.sync(), node.rank());
        let q = sync.queries.get() + 1;
        sync.queries.set(q);
        let (src, at) = sync.query_src();
        src.store(q, Release);
        let others: Vec<usize> = self.peers.iter().copied().filter(|&p| p != me).collect();
        for &p in &others {
            sync.flag(sync.answer_offset(p)).store(u64::MAX, Relaxed);
            let _ = write_word(self.s, p, at, sync.query_offset(me));
        }
        let mine = sync.entered.get();
        let arrived = |p: usize| {
            let a = sync.flag(sync.answer_offset(p)).load(Acquire);
            a != u64::MAX && a >= mine
        };
        // The whole window, even once everyone answered: ranks that time
        // out a little later still get this rank's answer.
        let until = Instant::now() + QUERY_WAIT;
        while Instant::now() < until {
            let _ = self.s.progress();
            answer_queries(self.s);
            thread::yield_now();
        }
        let mut missing: Vec<usize> = others.into_iter().filter(|&p| !arrived(p)).collect();
        if missing.is_empty() {
            missing.push(waited_on); // everyone answered late: name the one we waited on
        }
        log::warn!(
            "barrier timed out after {:?}: rank(s) {missing:?} did not arrive",
            self.timeout
        );
        for &p in &missing {
            let _ = self.s.target().core().flush_peer(p);
        }
        BarrierError::Timeout {
            missing,
            after: self.timeout,
        }
    }

    /// Waits for this barrier's signal writes. One that fails or does not
    /// complete means its target is gone (a transport without peer failure
    /// detection just never completes it): diagnosed like a wait timeout.
    fn finish(mut self) -> Result<(), BarrierError> {
        for (to, h) in std::mem::take(&mut self.writes) {
            let left = self
                .deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(100));
            match h.wait(left) {
                Ok(_) => {}
                Err(TransportError::Timeout { .. } | TransportError::Completion(_)) => {
                    return Err(self.timed_out(to));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Runs a barrier among `peers` (validated by the caller) on scope `s`.
pub(crate) fn run(
    s: &mut PollingScope<'_, '_, Node>,
    peers: &[usize],
    me_at: usize,
    timeout: Duration,
) -> Result<(), BarrierError> {
    let algorithm = s.target().algorithm();
    let m = peers.len();
    let sync = s.target().sync();
    sync.entered.set(sync.entered.get() + 1);
    let mut run = Run {
        s,
        peers,
        writes: Vec::new(),
        deadline: Instant::now() + timeout,
        timeout,
    };
    if m > 1 {
        match algorithm {
            BarrierAlgorithm::Dissemination => {
                let mut step = 1;
                while step < m {
                    run.signal(peers[(me_at + step) % m])?;
                    run.wait(peers[(me_at + m - step) % m])?;
                    step *= 2;
                }
            }
            BarrierAlgorithm::Centralized => {
                let root = peers[0];
                if me_at == 0 {
                    for &p in &peers[1..] {
                        run.wait(p)?;
                    }
                    for &p in &peers[1..] {
                        run.signal(p)?;
                    }
                } else {
                    run.signal(root)?;
                    run.wait(root)?;
                }
            }
            BarrierAlgorithm::BinaryTree => {
                let children: Vec<usize> = [2 * me_at + 1, 2 * me_at + 2]
                    .into_iter()
                    .filter(|&c| c < m)
                    .collect();
                for &c in &children {
                    run.wait(peers[c])?;
                }
                if me_at > 0 {
                    let parent = peers[(me_at - 1) / 2];
                    run.signal(parent)?;
                    run.wait(parent)?;
                }
                for &c in &children {
                    run.signal(peers[c])?;
                }
            }
        }
    }
    run.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_lists_are_validated() {
        assert_eq!(validate(&[0, 2, 5], 2, 6).unwrap(), 1);
        let reason = |peers: &[usize], me| match validate(peers, me, 4) {
            Err(BarrierError::InvalidPeers { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        assert!(reason(&[2, 1], 1).contains("sorted"));
        assert!(reason(&[1, 1], 1).contains("unique"));
        assert!(reason(&[1, 4], 1).contains("out of range"));
        assert!(reason(&[0, 2], 1).contains("contain"));
        assert!(reason(&[], 1).contains("contain"));
    }
}
