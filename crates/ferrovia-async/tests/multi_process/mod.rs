//! The multi-process async suite, run once per backend: every rank a
//! `ferrovia-async-rank` process on loopback. `async_suite!` instantiates
//! it with the environment that selects a backend.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const RANK_BIN: &str = env!("CARGO_BIN_EXE_ferrovia-async-rank");
const LIMIT: Duration = Duration::from_secs(240);

pub(crate) type BackendEnv = &'static [(&'static str, &'static str)];

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn(port: u16, rank: usize, n: usize, args: &[&str], backend: BackendEnv) -> Child {
    let mut c = Command::new(RANK_BIN);
    c.args(args)
        .env("FERROVIA_RANK", rank.to_string())
        .env("FERROVIA_WORLD_SIZE", n.to_string())
        .env("FERROVIA_RENDEZVOUS", format!("127.0.0.1:{port}"))
        .env(
            "FERROVIA_JOB_TOKEN",
            format!("async-test-{}", std::process::id()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in backend {
        c.env(k, v);
    }
    c.spawn().expect("spawn ferrovia-async-rank")
}

/// Waits for `child` up to `limit` (killing it past that): (exit code,
/// stdout, stderr).
fn finish(mut child: Child, limit: Duration) -> (Option<i32>, String, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    (
        status.and_then(|s| s.code()),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `args` on `n` ranks; every rank must succeed and print `expect`.
pub(crate) fn all_succeed(b: BackendEnv, n: usize, args: &[&str], expect: &str) {
    let port = free_port();
    let ranks: Vec<Child> = (0..n).map(|r| spawn(port, r, n, args, b)).collect();
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
    let port = free_port();
    let mut ranks: Vec<Child> = (0..n).map(|r| spawn(port, r, n, &["killed"], b)).collect();
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
            multi_process::ten_thousand_operations_across_four_ranks($env);
        }

        #[test]
        fn dropped_and_forgotten_futures_leave_canaries_intact() {
            multi_process::dropped_and_forgotten_futures_leave_canaries_intact($env);
        }

        #[test]
        fn a_killed_peer_is_named_by_every_pending_future() {
            multi_process::a_killed_peer_is_named_by_every_pending_future($env);
        }

        #[test]
        fn fetch_add_and_compare_swap_futures_count_exactly() {
            multi_process::atomics_run_or_are_refused_by_name($env, "atomics ok");
        }
    };
}
