//! Known histories on the simulated fabric, among them the ones of issue
//! 12 where per-pair running counts let a barrier pass without its peers.

use std::time::Duration;

use super::BarrierAlgorithm::{self, Centralized, Dissemination};
use super::sim::{Call, Config, History, Record, simulate};
use crate::error::{AbandonCause, BarrierError};

const MS: Duration = Duration::from_millis(1);
const LONG: Duration = Duration::from_secs(5);

fn config(world: usize, deaths: Vec<Option<Duration>>) -> Config {
    Config {
        world,
        deaths,
        broken: Vec::new(),
        detect: false,
        leave_resets: false,
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

/// The ranks a failure names as missing: itself, or through the rank that
/// abandoned the barrier.
fn named(rec: &Record) -> Vec<usize> {
    match &rec.result {
        Err(BarrierError::Timeout { missing, .. } | BarrierError::Unreachable { missing, .. }) => {
            missing.clone()
        }
        Err(BarrierError::Abandoned {
            because: AbandonCause::Unreachable(p) | AbandonCause::Missing(p),
            ..
        }) => vec![*p],
        other => panic!("{rec:?}: expected a barrier naming missing ranks, got {other:?}"),
    }
}

/// The rank that abandoned the barrier `rec` failed, and why.
fn abandoned_by(rec: &Record) -> (usize, AbandonCause) {
    match rec.result {
        Err(BarrierError::Abandoned { rank, because, .. }) => (rank, because),
        _ => panic!("{rec:?}: expected an abandoned barrier"),
    }
}

/// Issue 12 part 3: rank 2 is gone; rank 1 knows it and fails [0, 1, 2]
/// at once, and tells rank 0, which fails it too, long before its
/// timeout; rank 0 then waits out [0, 3] with a dead rank 3, so it enters
/// [0, 1] well after rank 1: neither leaves [0, 1] before the other
/// entered it.
#[test]
fn a_rank_that_failed_fast_waits_in_the_next_barrier_for_the_slow_one() {
    let d = Dissemination;
    let scripts = vec![
        vec![
            call(1, &[0, 1, 2], d, 50 * MS),
            call(3, &[0, 3], d, 50 * MS),
            call(2, &[0, 1], d, LONG),
        ],
        vec![
            call(0, &[1, 2], d, 5 * MS),
            call(1, &[0, 1, 2], d, 50 * MS),
            call(2, &[0, 1], d, LONG),
        ],
        vec![call(0, &[1, 2], d, LONG), call(1, &[0, 1, 2], d, LONG)],
        vec![call(3, &[0, 3], d, LONG)],
    ];
    let deaths = vec![None, None, Some(Duration::ZERO), Some(Duration::ZERO)];
    let h = simulate(&config(4, deaths), &scripts);
    assert_eq!(named(record(&h, 1, 0)), [2]);
    let fast = record(&h, 1, 1);
    assert!(
        matches!(fast.result, Err(BarrierError::Unreachable { .. })),
        "{fast:?}"
    );
    assert_eq!(named(fast), [2]);
    let told = record(&h, 0, 1);
    assert_eq!(abandoned_by(told), (1, AbandonCause::Unreachable(2)));
    assert!(told.ended < fast.ended + 10 * MS, "{told:?}");
    assert_eq!(named(record(&h, 0, 3)), [3]);
    for (r, other) in [(0, 1), (1, 0)] {
        let rec = record(&h, r, 2);
        assert!(rec.result.is_ok(), "{rec:?}");
        let entered = h.entered[2][other].unwrap_or(Duration::MAX);
        assert!(
            rec.ended >= entered,
            "rank {r} left [0, 1] before rank {other} entered it"
        );
    }
    let (late, early) = (h.entered[2][0], h.entered[2][1]);
    assert!(late > early.map(|t| t + 50 * MS), "{late:?} {early:?}");
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
    // Rank 1 tells ranks 2 and 3 it gave up, naming rank 0.
    assert_eq!(named(record(&h, 3, 0)), [0], "rank 3 must not pass B");
    assert_eq!(named(record(&h, 2, 0)), [0]);
    for r in [1, 3] {
        assert!(record(&h, r, 1).result.is_ok(), "{:?}", record(&h, r, 1));
    }
    assert!(record(&h, 1, 1).ended >= h.entered[1][3].unwrap_or(Duration::MAX));
}

/// Rank 0, the root of B = [0, 1, 2] (centralized), fails it and four
/// barriers [0, 2] after it while rank 2 is busy with a dead rank 3: its
/// abandon of B'4 lands in the very slot where rank 2 will wait for its
/// release of B (a ring of four). Rank 1 is later still. Only exact
/// matching tells the words apart: rank 2 fails B at once instead of
/// passing it before rank 1 entered it (its only wait is on rank 0, so
/// nothing else holds it back).
#[test]
fn a_word_four_barriers_later_in_the_same_slot_does_not_complete_a_barrier() {
    let c = Centralized;
    let b = [0, 1, 2];
    let ahead = |timeout| (2..=5).map(move |i| call(i, &[0, 2], c, timeout));
    let scripts = vec![
        std::iter::once(call(1, &b, c, MS))
            .chain(ahead(MS))
            .collect(),
        vec![call(0, &[1, 3], c, 300 * MS), call(1, &b, c, LONG)],
        [call(6, &[2, 3], c, 150 * MS), call(1, &b, c, LONG)]
            .into_iter()
            .chain(ahead(LONG))
            .collect(),
        vec![],
    ];
    let deaths = vec![None, None, None, Some(Duration::ZERO)];
    let h = simulate(&config(4, deaths), &scripts);
    let ahead_done = record(&h, 0, 5).ended;
    let rec = record(&h, 2, 1);
    assert!(
        rec.started > ahead_done,
        "{rec:?} entered before {ahead_done:?}"
    );
    assert!(
        matches!(rec.result, Err(BarrierError::Incomplete { rank: 0, .. })),
        "{rec:?}"
    );
    let late = h.entered[1][1].unwrap_or(Duration::MAX);
    assert!(rec.ended < late, "{rec:?}: rank 1 entered B at {late:?}");
    // Rank 1 hears rank 0's abandon of B, and rank 2 each of B'1 to B'4.
    assert_eq!(abandoned_by(record(&h, 1, 1)).0, 0);
    for i in 2..=5 {
        assert_eq!(
            abandoned_by(record(&h, 2, i)).0,
            0,
            "{:?}",
            record(&h, 2, i)
        );
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
    // Rank 0 gives up on the mismatch and tells rank 2, which fails long
    // before its timeout.
    let told = record(&h, 2, 0);
    assert_eq!(abandoned_by(told), (0, AbandonCause::Other));
    assert!(told.ended - told.started < 10 * MS, "{told:?}");
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

/// The case: rank 2 knows its connection to rank 0 broken (a
/// drain deadline flushed it), so it fails [0, 1, 2] at once. Rank 1
/// hears it from rank 2, rank 0 (which rank 2 cannot reach) from rank 1,
/// both naming rank 2 and the broken connection, long before their
/// timeout; the barriers after it, on sound pairs, pass.
#[test]
fn a_rank_that_abandons_a_barrier_is_heard_directly_and_passed_on() {
    let d = Dissemination;
    let all = [0, 1, 2];
    let scripts = vec![
        vec![call(0, &all, d, LONG), call(1, &[0, 1], d, LONG)],
        vec![
            call(0, &all, d, LONG),
            call(1, &[0, 1], d, LONG),
            call(2, &[1, 2], d, LONG),
        ],
        vec![call(0, &all, d, LONG), call(2, &[1, 2], d, LONG)],
    ];
    for detect in [false, true] {
        let mut cfg = config(3, vec![None; 3]);
        cfg.broken = vec![(2, 0)];
        cfg.detect = detect;
        let h = simulate(&cfg, &scripts);
        let gave_up = record(&h, 2, 0);
        assert_eq!(named(gave_up), [0], "{gave_up:?}");
        for r in [0, 1] {
            let rec = record(&h, r, 0);
            assert_eq!(
                abandoned_by(rec),
                (2, AbandonCause::Unreachable(0)),
                "{rec:?}"
            );
            assert!(rec.ended < 20 * MS, "{rec:?}");
        }
        for (r, id) in [(0, 1), (1, 1), (1, 2), (2, 2)] {
            assert!(record(&h, r, id).result.is_ok(), "{:?}", record(&h, r, id));
        }
    }
}
