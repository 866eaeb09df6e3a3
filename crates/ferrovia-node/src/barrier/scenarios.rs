//! Known histories on the simulated fabric, among them the ones of issue
//! 12 where per-pair running counts let a barrier pass without its peers.

use std::time::Duration;

use super::BarrierAlgorithm::{self, Centralized, Dissemination};
use super::sim::{Call, Config, History, Record, simulate};
use crate::error::BarrierError;

const MS: Duration = Duration::from_millis(1);
const LONG: Duration = Duration::from_secs(5);

fn config(world: usize, deaths: Vec<Option<Duration>>) -> Config {
    Config {
        world,
        deaths,
        detect: false,
        max_delay: 2 * MS,
        tick: MS / 2,
        query_wait: 20 * MS,
        seed: 7,
    }
}

fn call(id: usize, ranks: &[usize], algorithm: BarrierAlgorithm, timeout: Duration) -> Call {
    Call {
        id,
        ranks: ranks.to_vec(),
        algorithm,
        timeout,
    }
}

fn record(h: &History, rank: usize, id: usize) -> &Record {
    h.records
        .iter()
        .find(|r| r.rank == rank && r.call == id)
        .unwrap_or_else(|| panic!("rank {rank} has no record of barrier {id}: {h:?}"))
}

fn named(rec: &Record) -> Vec<usize> {
    match &rec.result {
        Err(BarrierError::Timeout { missing, .. } | BarrierError::Unreachable { missing, .. }) => {
            missing.clone()
        }
        other => panic!("{rec:?}: expected a barrier naming missing ranks, got {other:?}"),
    }
}

/// Issue 12 part 3: rank 2 is gone; rank 1 knows it and fails [0, 1, 2]
/// at once, rank 0 waits there; then [0, 1]: neither leaves it before the
/// other entered it, and rank 0 names only rank 2.
#[test]
fn a_rank_that_failed_fast_waits_in_the_next_barrier_for_the_slow_one() {
    let d = Dissemination;
    let scripts = vec![
        vec![call(1, &[0, 1, 2], d, 50 * MS), call(2, &[0, 1], d, LONG)],
        vec![
            call(0, &[1, 2], d, 5 * MS),
            call(1, &[0, 1, 2], d, 50 * MS),
            call(2, &[0, 1], d, LONG),
        ],
        vec![call(0, &[1, 2], d, LONG), call(1, &[0, 1, 2], d, LONG)],
    ];
    let h = simulate(&config(3, vec![None, None, Some(Duration::ZERO)]), &scripts);
    assert_eq!(named(record(&h, 1, 0)), [2]);
    let fast = record(&h, 1, 1);
    assert!(
        matches!(fast.result, Err(BarrierError::Unreachable { .. })),
        "{fast:?}"
    );
    assert_eq!(named(fast), [2]);
    let slow = record(&h, 0, 1);
    assert!(
        matches!(slow.result, Err(BarrierError::Timeout { .. })),
        "{slow:?}"
    );
    assert_eq!(
        named(slow),
        [2],
        "rank 1 entered [0, 1, 2]: only rank 2 is missing"
    );
    for (r, other) in [(0, 1), (1, 0)] {
        let rec = record(&h, r, 2);
        assert!(rec.result.is_ok(), "{rec:?}");
        let entered = h.entered[2][other].unwrap_or(Duration::MAX);
        assert!(
            rec.ended >= entered,
            "rank {r} left [0, 1] before rank {other} entered it"
        );
    }
    assert!(record(&h, 1, 2).ended >= slow.ended);
}

/// The design's example: world 4, rank 0 dead; rank 1 fails B waiting on
/// 0 and enters B' = [1, 3], signalling 3. Rank 3, still in B, must not
/// take that for rank 1's round-2 signal of B.
#[test]
fn a_later_barriers_signal_does_not_complete_an_earlier_one() {
    let d = Dissemination;
    let all = [0, 1, 2, 3];
    let scripts = vec![
        vec![call(0, &all, d, LONG)],
        vec![call(0, &all, d, MS), call(1, &[1, 3], d, LONG)],
        vec![call(0, &all, d, 60 * MS)],
        vec![call(0, &all, d, 60 * MS), call(1, &[1, 3], d, LONG)],
    ];
    let h = simulate(
        &config(4, vec![Some(Duration::ZERO), None, None, None]),
        &scripts,
    );
    assert_eq!(named(record(&h, 1, 0)), [0]);
    assert_eq!(named(record(&h, 3, 0)), [0], "rank 3 must not pass B");
    assert_eq!(named(record(&h, 2, 0)), [0]);
    for r in [1, 3] {
        assert!(record(&h, r, 1).result.is_ok(), "{:?}", record(&h, r, 1));
    }
    assert!(record(&h, 1, 1).ended >= h.entered[1][3].unwrap_or(Duration::MAX));
}

/// Rank 1 runs four barriers ahead of rank 3: its signal of B'4 lands in
/// the very slot where rank 3 waits for its round-2 signal of B (a ring
/// of four). Rank 0 is late to B (busy with a dead rank 4). Only exact
/// matching tells the signals apart: rank 3 fails B at once instead of
/// passing it before rank 0 entered it.
#[test]
fn a_signal_four_barriers_later_in_the_same_slot_does_not_complete_a_barrier() {
    let d = Dissemination;
    let b = [0, 1, 2, 3];
    let ahead = |timeout| (2..=5).map(move |i| call(i, &[1, 3], d, timeout));
    let scripts = vec![
        vec![call(0, &[0, 4], d, 150 * MS), call(1, &b, d, LONG)],
        std::iter::once(call(1, &b, d, MS))
            .chain(ahead(MS))
            .collect(),
        vec![call(1, &b, d, 300 * MS)],
        std::iter::once(call(1, &b, d, 300 * MS))
            .chain(ahead(LONG))
            .collect(),
        vec![call(0, &[0, 4], d, LONG)],
    ];
    let deaths = vec![None, None, None, None, Some(Duration::ZERO)];
    let h = simulate(&config(5, deaths), &scripts);
    let rec = record(&h, 3, 1);
    assert!(
        matches!(rec.result, Err(BarrierError::Incomplete { rank: 1, .. })),
        "{rec:?}"
    );
    let late = h.entered[1][0].unwrap_or(Duration::MAX);
    assert!(rec.ended < late, "{rec:?}: rank 0 entered B at {late:?}");
    // Ranks 1 and 3 then pass B'1 to B'4 at rank 3 (rank 1 entered them).
    for i in 2..=5 {
        assert!(record(&h, 3, i).result.is_ok(), "{:?}", record(&h, 3, i));
    }
}

fn mismatch_with(rec: &Record) -> usize {
    match rec.result {
        Err(BarrierError::Mismatch { rank, count, .. }) => {
            assert_eq!(count, 1, "{rec:?}");
            rank
        }
        _ => panic!("{rec:?}: expected a mismatch"),
    }
}

#[test]
fn ranks_calling_different_barriers_get_a_mismatch_naming_each_other() {
    // Same list, another algorithm.
    let scripts = vec![
        vec![call(0, &[0, 1], Dissemination, LONG)],
        vec![call(0, &[0, 1], Centralized, LONG)],
    ];
    let h = simulate(&config(2, vec![None, None]), &scripts);
    assert_eq!(mismatch_with(record(&h, 0, 0)), 1);
    assert_eq!(mismatch_with(record(&h, 1, 0)), 0);

    // Another list: rank 1 calls [0, 1] where ranks 0 and 2 call [0, 1, 2].
    let d = Dissemination;
    let scripts = vec![
        vec![call(0, &[0, 1, 2], d, LONG)],
        vec![call(0, &[0, 1], d, LONG)],
        vec![call(0, &[0, 1, 2], d, 30 * MS)],
    ];
    let h = simulate(&config(3, vec![None; 3]), &scripts);
    assert_eq!(mismatch_with(record(&h, 0, 0)), 1);
    assert_eq!(mismatch_with(record(&h, 1, 0)), 0);
    // Rank 1 never counted a barrier with rank 2: it did not arrive (rank
    // 0, done by then, does not answer either).
    assert!(named(record(&h, 2, 0)).contains(&1));
}

/// A rank whose connection to a listed one is broken fails at once, and
/// only the dead rank is named by those that wait it out.
#[test]
fn a_dead_rank_is_named_within_the_timeout_and_the_query_window() {
    let d = Dissemination;
    let all = [0, 1, 2];
    let scripts: Vec<Vec<Call>> = (0..3)
        .map(|_| (0..50).map(|i| call(i, &all, d, 30 * MS)).collect())
        .collect();
    let mut cfg = config(3, vec![None, None, Some(40 * MS)]);
    for detect in [false, true] {
        cfg.detect = detect;
        let h = simulate(&cfg, &scripts);
        for r in [0, 1] {
            let failed = h
                .records
                .iter()
                .find(|rec| rec.rank == r && rec.result.is_err())
                .unwrap_or_else(|| panic!("rank {r} never failed"));
            assert!(named(failed).contains(&2), "{failed:?}");
            assert!(
                failed.ended <= 40 * MS + 30 * MS + 20 * MS + 2 * MS,
                "{failed:?}"
            );
        }
    }
}
