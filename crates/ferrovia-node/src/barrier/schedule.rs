//! Which signals a rank sends and waits for in one barrier, in order.
//!
//! Steps name positions in the barrier's sorted rank list, not ranks. In
//! every algorithm each ordered pair of positions exchanges at most one
//! signal per barrier (checked by the tests below), so a signal is
//! identified by its pair and its barrier alone.

use super::BarrierAlgorithm;

/// One step of a rank's part in a barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Write this barrier's signal to the rank at this position.
    Signal(usize),
    /// Wait for this barrier's signal from the rank at this position.
    Wait(usize),
}

/// The steps of the rank at position `at` of an `m`-rank barrier.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    algorithm: BarrierAlgorithm,
    m: usize,
    at: usize,
}

impl Schedule {
    pub(crate) fn new(algorithm: BarrierAlgorithm, m: usize, at: usize) -> Schedule {
        Schedule { algorithm, m, at }
    }

    /// Step `i`, or `None` once the rank's part is done.
    pub(crate) fn step(&self, i: usize) -> Option<Step> {
        let (m, at) = (self.m, self.at);
        if m < 2 || at >= m {
            return None;
        }
        match self.algorithm {
            // Round r: signal at+2^r, wait for at-2^r (mod m), while 2^r < m.
            BarrierAlgorithm::Dissemination => {
                let dist = u32::try_from(i / 2)
                    .ok()
                    .and_then(|r| 1usize.checked_shl(r))
                    .filter(|&d| d < m)?;
                Some(if i.is_multiple_of(2) {
                    Step::Signal((at + dist) % m)
                } else {
                    Step::Wait((at + m - dist) % m)
                })
            }
            // The root waits for everyone, then releases everyone.
            BarrierAlgorithm::Centralized => {
                let others = m - 1;
                match (at, i) {
                    (0, i) if i < others => Some(Step::Wait(i + 1)),
                    (0, i) if i < 2 * others => Some(Step::Signal(i - others + 1)),
                    (_, 0) => Some(Step::Signal(0)),
                    (_, 1) => Some(Step::Wait(0)),
                    _ => None,
                }
            }
            // Wait for the children, tell the parent, wait for its release,
            // release the children.
            BarrierAlgorithm::BinaryTree => {
                let kids = (2 * at + 1..=2 * at + 2).filter(|&c| c < m);
                let nk = kids.clone().count();
                let up = if at > 0 { 2 } else { 0 };
                let parent = at.saturating_sub(1) / 2;
                if i < nk {
                    kids.clone().nth(i).map(Step::Wait)
                } else if i < nk + up {
                    Some(if i == nk {
                        Step::Signal(parent)
                    } else {
                        Step::Wait(parent)
                    })
                } else {
                    kids.clone().nth(i - nk - up).map(Step::Signal)
                }
            }
        }
    }

    /// Every step, in order.
    #[cfg(test)]
    pub(crate) fn steps(&self) -> Vec<Step> {
        (0..).map_while(|i| self.step(i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALGORITHMS: [BarrierAlgorithm; 3] = [
        BarrierAlgorithm::Dissemination,
        BarrierAlgorithm::Centralized,
        BarrierAlgorithm::BinaryTree,
    ];

    #[test]
    fn each_ordered_pair_exchanges_at_most_one_signal_and_every_signal_is_awaited() {
        for algorithm in ALGORITHMS {
            for m in 1..=40 {
                let mut signals = vec![vec![0u32; m]; m]; // [from][to]
                let mut waits = vec![vec![0u32; m]; m]; // [from][to]: `to` waits for `from`
                for at in 0..m {
                    for step in Schedule::new(algorithm, m, at).steps() {
                        match step {
                            Step::Signal(to) => signals[at][to] += 1,
                            Step::Wait(from) => waits[from][at] += 1,
                        }
                    }
                }
                for a in 0..m {
                    assert_eq!(signals[a][a], 0, "{algorithm:?} m={m}: {a} signals itself");
                    for b in 0..m {
                        assert!(signals[a][b] <= 1, "{algorithm:?} m={m}: {a}->{b} twice");
                        assert_eq!(
                            signals[a][b], waits[a][b],
                            "{algorithm:?} m={m}: {a}->{b} signalled {} times, awaited {}",
                            signals[a][b], waits[a][b]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_steps_are_the_known_algorithms() {
        use Step::{Signal as S, Wait as W};
        let steps = |a, m, at| Schedule::new(a, m, at).steps();
        assert_eq!(
            steps(BarrierAlgorithm::Dissemination, 5, 1),
            [S(2), W(0), S(3), W(4), S(0), W(2)]
        );
        assert_eq!(
            steps(BarrierAlgorithm::Centralized, 3, 0),
            [W(1), W(2), S(1), S(2)]
        );
        assert_eq!(steps(BarrierAlgorithm::Centralized, 3, 2), [S(0), W(0)]);
        assert_eq!(
            steps(BarrierAlgorithm::BinaryTree, 5, 1),
            [W(3), W(4), S(0), W(0), S(3), S(4)]
        );
        assert_eq!(
            steps(BarrierAlgorithm::BinaryTree, 5, 0),
            [W(1), W(2), S(1), S(2)]
        );
        assert_eq!(steps(BarrierAlgorithm::BinaryTree, 5, 4), [S(1), W(1)]);
        assert!(steps(BarrierAlgorithm::Dissemination, 1, 0).is_empty());
    }
}
