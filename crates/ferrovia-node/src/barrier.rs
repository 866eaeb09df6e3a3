//! Barriers made of one-sided RDMA writes: each signal writes the sender's
//! running count into a per-sender slot of the receiver, which watches the
//! slot with atomic loads. Counting per pair (not per barrier) lets any
//! subset of ranks, and any algorithm, share the same slots.

use std::thread;
use std::time::{Duration, Instant};

use ferrovia_channel::{
    Gather, PeerWriteWorkRequest, PollingScope, ScopedPendingWork, WriteWorkRequest,
};
use std::sync::atomic::Ordering::Release;

use crate::error::BarrierError;
use crate::node::Node;

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
    writes: Vec<ScopedPendingWork<'scope>>,
    deadline: Instant,
    timeout: Duration,
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
        self.writes.push(h);
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
                // Reap our own writes' completions, and let other ranks
                // sharing this CPU run.
                self.s.progress()?;
                thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        sync.seen[from].set(want);
        Ok(())
    }

    /// Names the rank waited on, plus every participant that does not
    /// answer a probe write (dead or unreachable).
    fn timed_out(&mut self, waited_on: usize) -> BarrierError {
        let mut missing = vec![waited_on];
        missing.extend(probe_unreachable(self.s, Duration::from_millis(900)));
        missing.sort_unstable();
        missing.dedup();
        BarrierError::Timeout {
            missing,
            after: self.timeout,
        }
    }

    fn finish(self) -> Result<(), BarrierError> {
        for h in self.writes {
            let left = self
                .deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(100));
            h.wait(left)?;
        }
        Ok(())
    }
}

/// Writes one word to every other rank's probe slot; returns the ranks
/// whose write fails or does not complete within `limit`.
fn probe_unreachable(s: &mut PollingScope<'_, '_, Node>, limit: Duration) -> Vec<usize> {
    let node = s.target();
    let sync = node.sync();
    let mut pending = Vec::new();
    let mut dead = Vec::new();
    for p in (0..node.world_size()).filter(|&p| p != node.rank()) {
        let posted = Gather::range(&sync.src, 0..8).and_then(|g| {
            let probe = sync.remote[p].sub_region(sync.probe_offset(), 8)?;
            s.post_write(PeerWriteWorkRequest::new(
                p,
                WriteWorkRequest::new(&[g], probe)?,
            ))
        });
        match posted {
            Ok(h) => pending.push((p, h)),
            Err(_) => dead.push(p),
        }
    }
    let deadline = Instant::now() + limit;
    for (p, h) in pending {
        if h.wait(deadline.saturating_duration_since(Instant::now()))
            .is_err()
        {
            dead.push(p);
        }
    }
    dead
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
    let mut run = Run {
        s,
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
