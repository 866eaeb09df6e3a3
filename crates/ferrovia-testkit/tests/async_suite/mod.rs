//! The multi-process async suite, run once per backend: every rank a
//! `ferrovia-async-rank` process on loopback (a `Job`). `async_suite!` instantiates
//! it with the environment that selects a backend.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::time::{Duration, Instant};

pub(crate) use ferrovia_testkit::BackendEnv;
use ferrovia_testkit::{Job, finish};

const RANK_BIN: &str = env!("CARGO_BIN_EXE_ferrovia-async-rank");
const LIMIT: Duration = Duration::from_secs(240);

/// Runs `args` on `n` ranks; every rank must succeed and print `expect`.
pub(crate) fn all_succeed(b: BackendEnv, n: usize, args: &[&str], expect: &str) {
    let job = Job::new(RANK_BIN, n, b);
    let ranks: Vec<Child> = (0..n).map(|r| job.spawn(r, args, &[])).collect();
    for (r, child) in ranks.into_iter().enumerate() {
        let (code, out, err) = finish(child, LIMIT);
        assert_eq!(code, Some(0), "rank {r} of {n} failed: {err}\n{out}");
        assert!(out.contains(expect), "rank {r}: {out}");
    }
}

pub(crate) fn ten_thousand_operations_across_four_ranks(b: BackendEnv) {
    all_succeed(b, 4, &["stress", "10000"], "stress ok");
}

pub(crate) fn dropped_and_forgotten_futures_leave_canaries_intact(b: BackendEnv) {
    all_succeed(b, 3, &["canary", "200"], "canary ok");
}

/// Remote atomics as futures: verbs runs them (`atomics ok`), UCX refuses
/// each with a typed error naming the peer (`atomics unsupported`).
pub(crate) fn atomics_run_or_are_refused_by_name(b: BackendEnv, expect: &str) {
    all_succeed(b, 3, &["atomics", "300"], expect);
}

/// Four ranks; once each printed `ready`, rank 2 is killed; the others'
/// pending and later futures must fail naming it.
pub(crate) fn a_killed_peer_is_named_by_every_pending_future(b: BackendEnv) {
    let n = 4;
    let job = Job::new(RANK_BIN, n, b);
    let mut ranks: Vec<Child> = (0..n).map(|r| job.spawn(r, &["killed"], &[])).collect();
    // Read each rank's stdout up to its `ready` line.
    let mut rest = Vec::new();
    for (r, child) in ranks.iter_mut().enumerate() {
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.starts_with("ready"));
        assert!(ready, "rank {r} never got ready");
        rest.push(lines);
    }
    ranks[2].kill().unwrap();
    let _ = ranks[2].wait();
    let killed = Instant::now();
    for (r, (child, lines)) in ranks.into_iter().zip(rest).enumerate() {
        if r == 2 {
            continue;
        }
        let (code, _, err) = finish(child, LIMIT);
        let out: Vec<String> = lines.map_while(Result::ok).collect();
        assert_eq!(code, Some(0), "rank {r} failed: {err}\n{out:?}");
        assert!(
            out.iter().any(|l| l.starts_with("killed ok")),
            "rank {r}: {out:?}"
        );
    }
    assert!(
        killed.elapsed() < Duration::from_secs(60),
        "the survivors took {:?} to name the dead rank",
        killed.elapsed()
    );
}

/// The suite's tests, over the backend `$env` selects.
#[macro_export]
macro_rules! async_suite {
    ($env:expr) => {
        #[test]
        fn ten_thousand_operations_across_four_ranks() {
            async_suite::ten_thousand_operations_across_four_ranks($env);
        }

        #[test]
        fn dropped_and_forgotten_futures_leave_canaries_intact() {
            async_suite::dropped_and_forgotten_futures_leave_canaries_intact($env);
        }

        #[test]
        fn a_killed_peer_is_named_by_every_pending_future() {
            async_suite::a_killed_peer_is_named_by_every_pending_future($env);
        }

        #[test]
        fn fetch_add_and_compare_swap_futures_count_exactly() {
            async_suite::atomics_run_or_are_refused_by_name($env, "atomics ok");
        }
    };
}
