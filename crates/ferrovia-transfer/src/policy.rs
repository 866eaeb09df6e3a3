//! Which rail a run of slices goes over. A run (up to 16 slices of one
//! peer, at most the engine's run size in bytes) is the unit: its pieces
//! leave with one doorbell on one rail.
//!
//! - [`RailPolicy::RoundRobin`]: the next alive rail, in turn.
//! - [`RailPolicy::LeastOutstanding`]: the rail expected to finish the run
//!   first: its outstanding bytes plus the run's, over a moving average of
//!   its throughput (what each completed run took). An equal share to
//!   every rail is what made four NICs slower than one elsewhere (a slow
//!   rail held every batch back); this gives a slow rail less.
//! - [`RailPolicy::NumaLocal`]: rails on the calling thread's NUMA node
//!   first (least outstanding among them); the others take a run only
//!   once the local ones hold `spill_bytes` outstanding.

use std::time::Duration;

/// How runs are spread over rails.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum RailPolicy {
    /// The next alive rail, in turn.
    RoundRobin,
    /// The rail predicted to finish the run first (the default).
    #[default]
    LeastOutstanding,
    /// Rails on this thread's NUMA node first; the others as spill-over,
    /// once the local ones have this many bytes outstanding.
    NumaLocal {
        /// Outstanding bytes on the local rails before others take runs.
        spill_bytes: u64,
    },
}

/// A rail's load, as the scheduler sees it.
#[derive(Debug, Clone, Copy)]
struct Load {
    outstanding: u64,
    /// Bytes per microsecond, a moving average of completed runs.
    rate: f64,
}

/// What the least-outstanding policy starts from: every rail alike.
const FIRST_RATE: f64 = 1000.0;
/// Weight of a new observation in the moving average.
const WEIGHT: f64 = 0.25;

/// Picks rails for runs and learns their throughput.
#[derive(Debug)]
pub(crate) struct Scheduler {
    policy: RailPolicy,
    loads: Vec<Load>,
    /// Per rail: on the calling thread's NUMA node (unknown counts as
    /// local).
    local: Vec<bool>,
    turn: usize,
}

impl Scheduler {
    pub(crate) fn new(policy: RailPolicy, rails: usize, local: Vec<bool>) -> Scheduler {
        Scheduler {
            policy,
            loads: vec![
                Load {
                    outstanding: 0,
                    rate: FIRST_RATE,
                };
                rails
            ],
            local,
            turn: 0,
        }
    }

    /// The rail for a run of `bytes` to a peer whose rail `r` works when
    /// `alive(r)`; `None` when none does.
    pub(crate) fn pick(&mut self, bytes: u64, alive: impl Fn(usize) -> bool) -> Option<usize> {
        let rails = self.loads.len();
        match self.policy {
            RailPolicy::RoundRobin => {
                for i in 0..rails {
                    let r = (self.turn + i) % rails;
                    if alive(r) {
                        self.turn = r + 1;
                        return Some(r);
                    }
                }
                None
            }
            RailPolicy::LeastOutstanding => self.soonest(bytes, &alive),
            RailPolicy::NumaLocal { spill_bytes } => {
                let local = self.soonest(bytes, |r| alive(r) && self.local[r]);
                match local {
                    Some(r) if self.loads[r].outstanding < spill_bytes => Some(r),
                    _ => self.soonest(bytes, &alive).or(local),
                }
            }
        }
    }

    /// Among rails `ok`, the one whose outstanding bytes plus `bytes`
    /// finish soonest at its rate.
    fn soonest(&self, bytes: u64, ok: impl Fn(usize) -> bool) -> Option<usize> {
        (0..self.loads.len())
            .filter(|&r| ok(r))
            .map(|r| {
                let l = self.loads[r];
                (
                    r,
                    (l.outstanding + bytes) as f64 / l.rate.max(f64::MIN_POSITIVE),
                )
            })
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(r, _)| r)
    }

    /// A run of `bytes` was posted on `rail`.
    pub(crate) fn posted(&mut self, rail: usize, bytes: u64) {
        self.loads[rail].outstanding += bytes;
    }

    /// A run of `bytes` on `rail` ended after `took` (failed runs too:
    /// their bytes are no longer outstanding; `learn` only for successes).
    pub(crate) fn ended(&mut self, rail: usize, bytes: u64, took: Duration, learn: bool) {
        let l = &mut self.loads[rail];
        l.outstanding = l.outstanding.saturating_sub(bytes);
        let us = took.as_secs_f64() * 1e6;
        if learn && us > 0.0 {
            let seen = bytes as f64 / us;
            l.rate = (1.0 - WEIGHT) * l.rate + WEIGHT * seen;
        }
    }

    /// Each rail's throughput estimate, bytes per microsecond.
    pub(crate) fn rates(&self) -> Vec<f64> {
        self.loads.iter().map(|l| l.rate).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_takes_alive_rails_in_turn() {
        let mut s = Scheduler::new(RailPolicy::RoundRobin, 3, vec![true; 3]);
        let picks: Vec<_> = (0..6).map(|_| s.pick(1, |r| r != 1).unwrap()).collect();
        assert_eq!(picks, [0, 2, 0, 2, 0, 2]);
        assert_eq!(s.pick(1, |_| false), None);
    }

    #[test]
    fn a_slow_rail_gets_less_than_an_equal_share() {
        let mut s = Scheduler::new(RailPolicy::LeastOutstanding, 2, vec![true; 2]);
        // Rail 1 turns out four times slower.
        for _ in 0..20 {
            s.ended(0, 1 << 20, Duration::from_micros(250), true);
            s.ended(1, 1 << 20, Duration::from_micros(1000), true);
        }
        let mut counts = [0; 2];
        for _ in 0..100 {
            let r = s.pick(1 << 16, |_| true).unwrap();
            s.posted(r, 1 << 16);
            counts[r] += 1;
        }
        assert!(counts[0] >= 3 * counts[1], "{counts:?}");
        assert!(counts[1] > 0, "the slow rail still takes some: {counts:?}");
    }

    #[test]
    fn numa_local_rails_first_others_past_the_spill() {
        let mut s = Scheduler::new(
            RailPolicy::NumaLocal {
                spill_bytes: 4 << 16,
            },
            2,
            vec![false, true],
        );
        let mut picks = Vec::new();
        for _ in 0..8 {
            let r = s.pick(1 << 16, |_| true).unwrap();
            s.posted(r, 1 << 16);
            picks.push(r);
        }
        assert_eq!(&picks[..4], &[1, 1, 1, 1], "local first: {picks:?}");
        assert!(picks[4..].contains(&0), "then spill-over: {picks:?}");
        // A dead local rail leaves the others.
        assert_eq!(s.pick(1, |r| r == 0), Some(0));
    }
}
