//! Barriers made of one-sided RDMA writes. A rank signals a peer by
//! writing a word into a slot of the peer's sync region (see
//! `sync_region`); the peer watches the slot with atomic loads.
//! Dissemination (the default), centralized and binary-tree algorithms
//! run over any sorted subset of the ranks ([`schedule`]).
//!
//! # Which barrier a signal belongs to
//!
//! **The collective rule.** Every rank calls the barriers it takes part in
//! in one order, and any two ranks call the barriers that list both of
//! them in the same order: for ranks `a` and `b`, the k-th barrier that
//! lists both, as `a` calls it, is the k-th as `b` calls it (same rank list,
//! same algorithm). A failed barrier counts like any other.
//!
//! **Pair counts.** Rank `a` keeps, for every peer `b`, the number of
//! barriers listing both that it has *entered* (called with a valid list),
//! whatever their outcome: entering increments the count of every other
//! listed rank, signalled in this barrier's algorithm or not. Under the
//! collective rule the pair `(a, b)` and its count `k` name one barrier,
//! the same at `a` and at `b`: that is a signal's identity.
//!
//! **Signals.** In a barrier, each ordered pair exchanges at most one
//! signal, in every algorithm. `a`'s signal to `b` is the word
//! `k << 24 | fingerprint`, `k` being `a`'s pair count with `b` and the
//! fingerprint 23 bits of the rank list and algorithm
//! ([`word`]). It goes into `a`'s slot `k % RING` at `b` (a ring of `RING`
//! = 4 slots per sender, so a sender may run up to three barriers ahead
//! of a receiver that has yet to read it). A rank that leaves a barrier
//! without passing it writes instead, into the same slot, the *abandon*
//! word of the same count and fingerprint (the signal with a flag bit
//! set), after a reason word in a slot of its own (see Failures).
//!
//! **Matching.** `b`, in the barrier of pair count `k` with `a`, accepts only
//! the word equal to `a`'s signal for `k` with its own fingerprint: exact
//! equality, never "at least". Anything else in the slot is an earlier
//! barrier's signal (wait), a later barrier's (`a` left this one without
//! signalling here, or its signal was overwritten; writes of one pair land
//! in posting order, so it will not come: the barrier fails at once,
//! [`BarrierError::Incomplete`]), or the same count with another
//! fingerprint (`a` called another barrier: [`BarrierError::Mismatch`]).
//! `a`'s abandon word of exactly `k` and this fingerprint fails the
//! barrier at once ([`BarrierError::Abandoned`]). An abandon never equals
//! a signal, so it never makes a barrier pass, and only its own barrier
//! takes it for one: to a later barrier of the pair it is an earlier
//! one's word (wait); to a receiver still four barriers behind, a later
//! barrier's word, exactly as `a`'s signal in its place would be.
//! A lost or overwritten signal can make a barrier fail, never pass. The
//! fingerprint only diagnoses a broken collective rule (23 bits: one such
//! break in 2^23 goes unseen); the invariant below rests on the counts.
//!
//! **Invariant.** A barrier returns `Ok` only if every listed rank entered
//! that same barrier (and this rank's own signal writes have completed,
//! or ended with their peer's connection: a peer that took the signal may
//! leave before the acknowledgment is back). Each accepted signal is from the sender's part in
//! this very barrier, and the algorithms are correct barriers when every
//! signal is the one they expect (a round of dissemination carries what
//! its sender learnt in this barrier's earlier rounds, never a later
//! barrier's knowledge). Because counts move on entry, not on success, a
//! failure leaves nothing to resynchronise: the next barrier of a pair
//! has the next count on both sides whatever happened (abandoning changes
//! no count). The property tests (`properties`) check the invariant over
//! random histories on a simulated fabric (`sim`) that delays and
//! reorders writes, loses those to dead ranks, kills ranks at random
//! points, and breaks connections on one side; and that an abandon fails
//! its barrier quickly wherever it lands and no other barrier.
//!
//! # Failures
//!
//! A listed peer whose connection is already known broken when the
//! barrier begins (a write to it failed, or an earlier barrier gave up on
//! it) fails the barrier at once ([`BarrierError::Unreachable`]); such a
//! pair stays broken. When a wait times out, or the connection of the
//! peer it waits on breaks during the barrier (a break of a peer whose
//! part is done, which may have passed and left, does not count), the
//! rank asks every listed peer,
//! by RDMA write into its query slot, for its pair count with the asker;
//! ranks spinning in any barrier answer (an answer carries the query's
//! number, so a late answer to an older query is not taken). A peer
//! arrived if its answer is at least the asker's own pair count with it.
//! The others are named ([`BarrierError::Timeout`], with the time actually
//! taken, the 0.5 s query window included); those that did not answer at
//! all (dead, unreachable, or busy outside any barrier) have their
//! connections flushed, so nothing is left waiting on them. Ranks that
//! answered are not flushed: their pair stays usable. If every peer
//! arrived, the rank whose signal never came is named
//! ([`BarrierError::Incomplete`]). A barrier returns within its timeout
//! and the query window, plus up to the query window again when it
//! fails: a failed barrier waits that long for its own writes, then
//! flushes the peers they are still outstanding to (a dead rank's
//! writes can retry for longer than a scope's drain deadline).
//!
//! A rank that fails a barrier, whatever the reason, or cancels it (an
//! async barrier dropped), abandons it: it writes its abandon word to every
//! listed peer whose connection it does not know broken, each after a
//! reason (who gave up first, and why: a listed rank it found unreachable
//! or that did not arrive). A rank in the barrier that finds a listed
//! peer's abandon for it (in the slot it waits on, or in any listed peer's
//! when it checks peers) fails at once, naming who gave up first and why,
//! and abandons in turn, passing that on: so ranks the first cannot reach
//! hear it through the others, instead of waiting out their timeout. A
//! rank already querying finishes its query window. The reason only
//! diagnoses: one overwritten by a later abandon's reason (it carries 16
//! bits of the count) or not landed yet names the peer that told.

use std::task::Poll;
use std::thread;
use std::time::Duration;

use ferrovia_channel::PollingScope;

use crate::error::BarrierError;

mod engine;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod scenarios;
mod schedule;
mod scope_fabric;
#[cfg(test)]
mod sim;
mod word;

pub(crate) use engine::{Fabric, Landed, RankState, Run};
pub(crate) use scope_fabric::Member;

use scope_fabric::ScopeFabric;

/// How long a timed-out rank waits for answers to its query.
pub(crate) const QUERY_WAIT: Duration = Duration::from_millis(500);
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

/// Runs a barrier among `peers` (validated by the caller) on scope `s`.
/// The barrier's end, as an event in its span: how long it took (which
/// barrier was slow), or why it failed (the error names the ranks).
pub(crate) fn passed(result: &Result<(), BarrierError>, took: Duration) {
    match result {
        Ok(()) => tracing::debug!(took_us = took.as_micros() as u64, "barrier passed"),
        Err(e) => tracing::debug!(took_us = took.as_micros() as u64, "barrier failed: {e}"),
    }
}

pub(crate) fn run<M: Member>(
    s: &mut PollingScope<'_, '_, M>,
    peers: &[usize],
    me_at: usize,
    timeout: Duration,
) -> Result<(), BarrierError> {
    let member: &M = s.target();
    let algorithm = member.algorithm();
    let _span = tracing::debug_span!(
        "barrier",
        rank = member.rank(),
        ranks = ?peers,
        algorithm = ?algorithm
    )
    .entered();
    let mut state = member.barrier_state().borrow_mut();
    let mut fabric = ScopeFabric::new(s);
    let mut run = Run::enter(
        &mut state,
        fabric.now(),
        peers,
        me_at,
        algorithm,
        timeout,
        QUERY_WAIT,
    );
    let mut spins = 0u32;
    loop {
        spins = spins.wrapping_add(1);
        // Every 256 spins: reap our writes' completions, answer queries of
        // ranks that timed out, check peers, and let ranks sharing this
        // CPU run.
        let slow = spins.is_multiple_of(256);
        if let Poll::Ready(result) = run.poll(&mut state, &mut fabric, slow) {
            passed(&result, fabric.now());
            return result.map_err(|mut e| {
                let settling = std::time::Instant::now();
                fabric.settle(QUERY_WAIT);
                e.add_time(settling.elapsed());
                e
            });
        }
        if slow {
            thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
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
