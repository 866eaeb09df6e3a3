//! The 64-bit words barrier ranks write into each other's sync regions.
//!
//! A signal is `count << 24 | fingerprint`: the pair count (40 bits, see
//! the module docs of `barrier`) and 23 bits of the barrier's rank list
//! and algorithm, bit 23 clear. The fingerprint is never 0, so no signal
//! is 0, the value of a slot nobody wrote. The same word with bit 23 set
//! says the sender abandoned that barrier: it never equals a signal, so it
//! can only fail the barrier of its count and fingerprint. An answer to a
//! query is `query << 40 | count` (24 bits of the query number, 40 of the
//! pair count). A reason (why a sender abandoned) is 16 bits of the pair
//! count, 2 of cause, and two ranks of 23 bits: who gave up first and the
//! rank it blames.

use super::BarrierAlgorithm;
use crate::error::AbandonCause;
pub(crate) use crate::sync_region::RING;

const COUNT_BITS: u32 = 40;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const SMALL_BITS: u32 = 64 - COUNT_BITS;
const SMALL_MASK: u64 = (1 << SMALL_BITS) - 1;
const FP_MASK: u64 = (1 << (SMALL_BITS - 1)) - 1;
/// Set in an abandon word, never in a signal.
const ABANDONED: u64 = 1 << (SMALL_BITS - 1);

/// The slot of the ring that carries the signal of pair count `count`.
pub(crate) fn slot(count: u64) -> usize {
    (count % RING as u64) as usize
}

/// 23 bits (never 0) of a barrier's sorted rank list and algorithm:
/// FNV-1a, so every rank computes the same whatever its build.
pub(crate) fn fingerprint(peers: &[usize], algorithm: BarrierAlgorithm) -> u64 {
    let tag: u64 = match algorithm {
        BarrierAlgorithm::Dissemination => 1,
        BarrierAlgorithm::Centralized => 2,
        BarrierAlgorithm::BinaryTree => 3,
    };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in std::iter::once(tag).chain(peers.iter().map(|&p| p as u64)) {
        for b in v.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    let folded = (h ^ (h >> 23) ^ (h >> 46)) & FP_MASK;
    folded.max(1)
}

/// The signal of pair count `count` in the barrier of fingerprint `fp`.
pub(crate) fn signal(count: u64, fp: u64) -> u64 {
    (count & COUNT_MASK) << SMALL_BITS | (fp & FP_MASK)
}

/// The word saying the sender abandoned the barrier of pair count `count`
/// and fingerprint `fp`: that barrier's signal with the abandon bit set.
pub(crate) fn abandon(count: u64, fp: u64) -> u64 {
    signal(count, fp) | ABANDONED
}

/// The pair count in a signal or abandon word.
#[cfg(test)]
pub(crate) fn count_of(word: u64) -> u64 {
    word >> SMALL_BITS
}

/// What a receiver expecting pair count `count` and fingerprint `fp` sees
/// in the slot of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// This barrier's signal.
    Match,
    /// Nothing yet, or an earlier barrier's signal.
    Pending,
    /// The sender's signal of a later barrier with this rank: it entered
    /// and left this barrier, and its signal here was never sent or was
    /// overwritten. This barrier cannot complete here.
    Ahead,
    /// The sender abandoned this very barrier (same count and fingerprint).
    Abandoned,
    /// The right count with another fingerprint: the sender called a
    /// different barrier (rank list or algorithm) at this point.
    Mismatch,
}

/// Classifies `word`. Only exact equality matches: a later count never
/// stands in for the expected one.
pub(crate) fn classify(word: u64, count: u64, fp: u64) -> Seen {
    if word == signal(count, fp) {
        return Seen::Match;
    }
    if word == abandon(count, fp) {
        return Seen::Abandoned;
    }
    if word == 0 {
        return Seen::Pending;
    }
    let theirs = word >> SMALL_BITS;
    if theirs == count & COUNT_MASK {
        Seen::Mismatch
    } else if reached(theirs, count) {
        Seen::Ahead
    } else {
        Seen::Pending
    }
}

/// Whether the 40-bit count `theirs` is at or past `ours` (modulo 2^40:
/// counts wrap after 2^40 barriers of one pair).
pub(crate) fn reached(theirs: u64, ours: u64) -> bool {
    (theirs.wrapping_sub(ours) & COUNT_MASK) < 1 << (COUNT_BITS - 1)
}

/// The answer to query `query`: this rank's pair count with the querier.
pub(crate) fn answer(query: u64, count: u64) -> u64 {
    (query & SMALL_MASK) << COUNT_BITS | (count & COUNT_MASK)
}

/// The pair count in `word` if it answers query `query`.
pub(crate) fn answer_count(word: u64, query: u64) -> Option<u64> {
    (word != 0 && word >> COUNT_BITS == query & SMALL_MASK).then_some(word & COUNT_MASK)
}

/// The query number after `q`; skips numbers whose answer field is 0, so
/// an answer is never the 0 of a slot nobody wrote.
pub(crate) fn next_query(q: u64) -> u64 {
    let n = q.wrapping_add(1);
    if n & SMALL_MASK == 0 { n + 1 } else { n }
}

const TAG_BITS: u32 = 16;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const RANK_BITS: u32 = 23;
const RANK_MASK: u64 = (1 << RANK_BITS) - 1;

/// The reason sent with an abandon of pair count `count`: `origin` gave
/// up first, for `cause`. Ranks are stored plus one (0: none); a rank too
/// large for 23 bits is left out. Only 16 bits of the count: enough to
/// tell it from a later abandon's reason that overwrote it (a reason only
/// diagnoses; the abandon word itself is checked in full).
pub(crate) fn reason(count: u64, origin: usize, cause: AbandonCause) -> u64 {
    let field = |r: usize| (r as u64).checked_add(1).filter(|&v| v <= RANK_MASK);
    let Some(origin) = field(origin) else {
        return 0;
    };
    let (kind, blamed) = match cause {
        AbandonCause::Unreachable(p) => (1, field(p)),
        AbandonCause::Missing(p) => (2, field(p)),
        AbandonCause::Other => (0, None),
    };
    let (kind, blamed) = blamed.map_or((0, 0), |b| (kind, b));
    (count & TAG_MASK) << (64 - TAG_BITS) | kind << (2 * RANK_BITS) | origin << RANK_BITS | blamed
}

/// Who gave up first and why, from `word`, if it is the reason sent with
/// the abandon of pair count `count`.
pub(crate) fn read_reason(word: u64, count: u64) -> Option<(usize, AbandonCause)> {
    let origin = (word >> RANK_BITS & RANK_MASK).checked_sub(1)?;
    if word >> (64 - TAG_BITS) != count & TAG_MASK {
        return None;
    }
    let blamed = (word & RANK_MASK).checked_sub(1).map(|b| b as usize);
    let cause = match (word >> (2 * RANK_BITS) & 3, blamed) {
        (1, Some(p)) => AbandonCause::Unreachable(p),
        (2, Some(p)) => AbandonCause::Missing(p),
        _ => AbandonCause::Other,
    };
    Some((origin as usize, cause))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: BarrierAlgorithm = BarrierAlgorithm::Dissemination;

    #[test]
    fn only_the_exact_signal_matches() {
        let fp = fingerprint(&[0, 1, 2], D);
        assert_eq!(classify(signal(7, fp), 7, fp), Seen::Match);
        assert_eq!(classify(0, 7, fp), Seen::Pending);
        assert_eq!(classify(signal(3, fp), 7, fp), Seen::Pending);
        assert_eq!(classify(signal(11, fp), 7, fp), Seen::Ahead);
        let other = fingerprint(&[0, 1], D);
        assert_ne!(fp, other);
        assert_eq!(classify(signal(7, other), 7, fp), Seen::Mismatch);
        assert_eq!(classify(signal(11, other), 7, fp), Seen::Ahead);
    }

    #[test]
    fn an_abandon_fails_only_its_own_barrier_and_is_never_a_signal() {
        let fp = fingerprint(&[0, 1, 2], D);
        assert_eq!(classify(abandon(7, fp), 7, fp), Seen::Abandoned);
        // An earlier barrier's abandon is stale, a later one's is ahead (as
        // its signal would be), another barrier's is a mismatch.
        assert_eq!(classify(abandon(3, fp), 7, fp), Seen::Pending);
        assert_eq!(classify(abandon(11, fp), 7, fp), Seen::Ahead);
        let other = fingerprint(&[0, 1], D);
        assert_eq!(classify(abandon(7, other), 7, fp), Seen::Mismatch);
        for k in [0, 1, 7, COUNT_MASK, COUNT_MASK + 5] {
            for f in [1, fp, other, FP_MASK] {
                assert_ne!(abandon(k, f), signal(k, f));
                assert_ne!(classify(abandon(k, f), k, f), Seen::Match);
                assert_eq!(signal(k, f) & ABANDONED, 0);
            }
        }
    }

    #[test]
    fn reasons_carry_origin_and_cause_for_their_count_only() {
        use AbandonCause::{Missing, Other, Unreachable};
        for cause in [Unreachable(0), Missing(5), Other] {
            assert_eq!(read_reason(reason(9, 2, cause), 9), Some((2, cause)));
        }
        assert_eq!(read_reason(reason(9, 2, Other), 10), None);
        assert_eq!(read_reason(0, 0), None);
        assert_eq!(read_reason(0, 1 << 16), None);
        let k = (1 << 16) + 3;
        assert_eq!(
            read_reason(reason(k, 0, Missing(4)), k),
            Some((0, Missing(4)))
        );
        // Ranks too large to carry: the cause, or the whole reason, is left out.
        let huge = 1 << 23;
        assert_eq!(
            read_reason(reason(1, 3, Unreachable(huge)), 1),
            Some((3, Other))
        );
        assert_eq!(reason(1, huge, Other), 0);
    }

    #[test]
    fn fingerprints_tell_lists_and_algorithms_apart_and_are_never_zero() {
        let a = fingerprint(&[0, 1, 2], D);
        assert_ne!(a, fingerprint(&[0, 1, 2], BarrierAlgorithm::Centralized));
        assert_ne!(a, fingerprint(&[0, 1, 3], D));
        assert_ne!(a, fingerprint(&[0, 2, 1], D));
        assert_eq!(a, fingerprint(&[0, 1, 2], D));
        for n in 0..2000 {
            let list: Vec<usize> = (0..n % 7).map(|i| i * n).collect();
            let f = fingerprint(&list, D);
            assert!(f != 0 && f <= FP_MASK && signal(0, f) != 0);
        }
    }

    #[test]
    fn counts_compare_across_the_40_bit_wrap() {
        assert!(reached(5, 5) && reached(6, 5) && !reached(4, 5));
        assert!(reached(2, COUNT_MASK - 1)); // wrapped past
        assert!(!reached(COUNT_MASK, 1));
        let fp = 9;
        let k = COUNT_MASK + 3; // the 2^40+3rd barrier of a pair
        assert_eq!(classify(signal(k, fp), k, fp), Seen::Match);
        assert_eq!(classify(signal(k - 1, fp), k, fp), Seen::Pending);
        assert_eq!(classify(signal(k + 4, fp), k, fp), Seen::Ahead);
    }

    #[test]
    fn answers_carry_their_query() {
        assert_eq!(answer_count(answer(5, 42), 5), Some(42));
        assert_eq!(answer_count(answer(4, 42), 5), None);
        assert_eq!(answer_count(0, 5), None);
        let q = next_query(SMALL_MASK);
        assert_ne!(q & SMALL_MASK, 0);
        assert_eq!(answer_count(answer(q, 0), q), Some(0));
        assert_eq!(next_query(1), 2);
    }
}
