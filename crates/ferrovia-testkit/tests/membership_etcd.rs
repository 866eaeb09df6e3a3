//! Store-backed membership over etcd (Debian's etcd-server, started by
//! each test on loopback with a data directory of its own), ranks over UCX
//! on tcp: a member killed drops out within its lease, a new process takes
//! its rank, and data and barriers work across all four with nothing
//! stale; and the faults: the store unreachable at start, lost mid-job,
//! and two processes claiming one rank.
#![cfg(all(feature = "etcd", feature = "ucx"))]

mod membership_common;

use std::time::{Duration, Instant};

use membership_common::{BackendEnv, Etcd, Member, finish_member, replace_rank_two};

const UCX_TCP: BackendEnv = &[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")];

#[test]
fn a_killed_member_drops_out_within_its_lease_and_a_replacement_takes_its_rank() {
    let ttl_ms = 2000;
    let (left_ms, passed_ms) = replace_rank_two(UCX_TCP, ttl_ms);
    println!(
        "kill -> Left at every survivor: {left_ms} ms; kill -> barrier of all four: {passed_ms} ms (lease {ttl_ms} ms)"
    );
    assert!(
        left_ms <= u128::from(ttl_ms) + 1000,
        "the survivors heard of the death {left_ms} ms after the kill"
    );
}

#[test]
fn an_unreachable_store_fails_the_start_within_its_bound_naming_it() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("etcd://127.0.0.1:{port}/nobody");
    let started = Instant::now();
    let mut m = Member::spawn(
        &url,
        0,
        2,
        &["exchange", "1"],
        UCX_TCP,
        &[("FERROVIA_STORE_TIMEOUT_MS", "1000")],
    );
    let (code, _, err) = finish_member(&mut m);
    let took = started.elapsed();
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("the store at 127.0.0.1:{port} did not answer")),
        "{err}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn a_second_process_claiming_a_live_rank_is_refused_naming_the_holder() {
    let etcd = Etcd::start();
    let url = etcd.url("claims");
    let mut first = Member::spawn(&url, 1, 2, &["exchange", "1"], UCX_TCP, &[]);
    // Rank 1 is claimed as soon as its node is being built; give it time.
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    let mut second = Member::spawn(&url, 1, 2, &["exchange", "1"], UCX_TCP, &[]);
    let (code, _, err) = finish_member(&mut second);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("rank 1 is held by another live process")
            && err.contains(&format!("pid {}", first.child.id())),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // The job itself completes once rank 0 comes.
    let mut zero = Member::spawn(&url, 0, 2, &["exchange", "1"], UCX_TCP, &[]);
    for m in [&mut zero, &mut first] {
        let (code, out, err) = finish_member(m);
        assert_eq!(code, Some(0), "{out}\n{err}");
        assert!(out.contains("verified (met through etcd"), "{out}");
    }
}

#[test]
fn a_store_lost_mid_job_leaves_the_data_path_running_and_membership_waiting() {
    let mut etcd = Etcd::start();
    let url = etcd.url("lost");
    let env = [
        ("FERROVIA_STORE_TTL_MS", "3000"),
        ("FERROVIA_STORE_TIMEOUT_MS", "1000"),
    ];
    let mut members: Vec<Member> = (0..2)
        .map(|r| Member::spawn(&url, r, 2, &["store-lost"], UCX_TCP, &env))
        .collect();
    for m in &mut members {
        m.wait_line("ready at", Duration::from_secs(120));
    }
    etcd.kill();
    for m in &mut members {
        m.wait_line("waiting for the store", Duration::from_secs(60));
    }
    etcd.restart();
    for (r, m) in members.iter_mut().enumerate() {
        let (code, out, err) = finish_member(m);
        assert_eq!(code, Some(0), "rank {r}:\n{out}\n{err}");
        assert!(out.contains("event StoreLost"), "{out}");
        assert!(
            out.contains("the data path runs without the store"),
            "{out}"
        );
        let publish = out
            .lines()
            .find(|l| l.contains("publish without the store"))
            .unwrap_or_default();
        assert!(
            publish.contains("Err(the store at") && publish.contains("did not answer"),
            "{publish}"
        );
        let ms: u64 = publish
            .rsplit("after ")
            .next()
            .and_then(|t| t.trim_end_matches(" ms").parse().ok())
            .unwrap_or(u64::MAX);
        assert!(ms <= 1500, "{publish}");
        assert!(out.contains("event StoreBack"), "{out}");
        assert!(out.contains("wrote through rank"), "{out}");
    }
}

/// Ranks 0 and 1 of 3 come, rank 2 never does: both fail at their
/// bootstrap timeout (6 s: the other tests start ranks meanwhile), naming
/// rank 2 (the later one may name the first too: a rank that gave up
/// gives its claim back at once).
#[test]
fn a_rank_that_never_comes_fails_the_others_start_naming_it() {
    let etcd = Etcd::start();
    let url = etcd.url("absent");
    let limit = [("FERROVIA_BOOTSTRAP_TIMEOUT_MS", "6000")];
    let started = Instant::now();
    let mut ranks: Vec<Member> = (0..2)
        .map(|r| Member::spawn(&url, r, 3, &["exchange", "1"], UCX_TCP, &limit))
        .collect();
    for m in &mut ranks {
        let (code, _, err) = finish_member(m);
        assert_eq!(code, Some(2), "{err}");
        let named = err
            .split("rank(s) [")
            .nth(1)
            .and_then(|r| r.split(']').next())
            .unwrap_or_default();
        assert!(
            err.contains("never checked in") && named.split(", ").any(|r| r == "2"),
            "{err}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}
