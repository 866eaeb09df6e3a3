//! The 64-bit words barrier ranks write into each other's sync regions.
//!
//! A signal is `count << 24 | fingerprint`: the pair count (40 bits, see
//! the module docs of `barrier`) and 24 bits of the barrier's rank list
//! and algorithm. The fingerprint is never 0, so no signal is 0, the value
//! of a slot nobody wrote. An answer to a query is `query << 40 | count`
//! (24 bits of the query number, 40 of the pair count).

use super::BarrierAlgorithm;

/// Signal slots per sender at each receiver: a sender may be this many
/// barriers (with that receiver) ahead before it overwrites a signal the
/// receiver has yet to read.
pub(crate) const RING: usize = 4;

const COUNT_BITS: u32 = 40;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const SMALL_BITS: u32 = 64 - COUNT_BITS;
const SMALL_MASK: u64 = (1 << SMALL_BITS) - 1;

/// The slot of the ring that carries the signal of pair count `count`.
pub(crate) fn slot(count: u64) -> usize {
    (count % RING as u64) as usize
}

/// 24 bits (never 0) of a barrier's sorted rank list and algorithm:
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
    let folded = (h ^ (h >> 24) ^ (h >> 48)) & SMALL_MASK;
    folded.max(1)
}

/// The signal of pair count `count` in the barrier of fingerprint `fp`.
pub(crate) fn signal(count: u64, fp: u64) -> u64 {
    (count & COUNT_MASK) << SMALL_BITS | fp
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
    fn fingerprints_tell_lists_and_algorithms_apart_and_are_never_zero() {
        let a = fingerprint(&[0, 1, 2], D);
        assert_ne!(a, fingerprint(&[0, 1, 2], BarrierAlgorithm::Centralized));
        assert_ne!(a, fingerprint(&[0, 1, 3], D));
        assert_ne!(a, fingerprint(&[0, 2, 1], D));
        assert_eq!(a, fingerprint(&[0, 1, 2], D));
        for n in 0..2000 {
            let list: Vec<usize> = (0..n % 7).map(|i| i * n).collect();
            let f = fingerprint(&list, D);
            assert!(f != 0 && f <= SMALL_MASK && signal(0, f) != 0);
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
