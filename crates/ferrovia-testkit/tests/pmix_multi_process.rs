//! The multi-process suite under Open MPI's `mpirun` (Debian's 4.1, PMIx
//! 4.2) over UCX on tcp: every node bootstraps through PMIx (put, commit,
//! fence, get), with no rank-0 rendezvous and no token to guess. The
//! suite's tests whose ranks all run one command run here; the others
//! start, kill or delay single ranks, which `mpirun` does not do. Then
//! what PMIx adds: a fence a rank never enters, and libpmix missing.
#![cfg(feature = "ucx")]

mod suite;

use std::process::Command;
use std::time::{Duration, Instant};

use suite::{MPIRUN, RANK_BIN, run_all};

const UCX_TCP: suite::BackendEnv = &[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp"), MPIRUN];

#[test]
fn two_ranks_exchange_with_every_operation() {
    suite::exchange(UCX_TCP, 2, "10");
}

#[test]
fn four_ranks_exchange_with_every_operation() {
    let results = run_all(
        UCX_TCP,
        4,
        &["exchange", "4"],
        &[],
        Duration::from_secs(240),
    );
    // Each rank says how it met: through PMIx.
    for (r, (_, out, _)) in results.iter().enumerate() {
        assert!(
            out.contains("verified (met through PMIx)"),
            "rank {r}: {out}"
        );
    }
}

#[test]
fn eight_ranks_exchange_with_every_operation() {
    suite::exchange(UCX_TCP, 8, "2");
}

#[test]
fn centralized_and_tree_barriers_with_five_ranks() {
    suite::exchange_with(UCX_TCP, 5, "2", "centralized");
    suite::exchange_with(UCX_TCP, 5, "2", "tree");
}

#[test]
fn a_barrier_does_not_pass_on_a_signal_of_an_earlier_failed_one() {
    suite::a_barrier_does_not_pass_on_a_signal_of_an_earlier_failed_one(UCX_TCP);
}

#[test]
fn a_write_with_a_deregistered_key_is_refused() {
    suite::a_write_with_a_deregistered_key_is_refused(UCX_TCP);
}

#[test]
fn work_with_a_dead_rank_fails_naming_it() {
    suite::work_with_a_dead_rank_fails_naming_it(UCX_TCP);
}

#[test]
fn four_ranks_count_exactly_and_a_ticket_lock_loses_no_update() {
    suite::atomics::four_ranks_count_exactly_and_a_ticket_lock_loses_no_update(UCX_TCP);
}

#[test]
fn a_flushed_connection_reconnects_and_barriers_pass() {
    // The control path's token came from rank 0 through PMIx.
    suite::reconnect::a_flushed_connection_reconnects_and_barriers_pass(UCX_TCP);
}

#[test]
fn a_message_on_a_flushed_connection_never_reaches_the_new_one() {
    suite::reconnect::a_message_on_a_flushed_connection_never_reaches_the_new_one(UCX_TCP);
}

#[test]
fn two_rails_carry_data_and_one_reconnects_while_the_rest_works() {
    suite::rails::two_rails_carry_data_and_one_reconnects_while_the_rest_works(UCX_TCP);
}

#[test]
fn all_to_all_through_the_pool() {
    suite::pool::all_to_all_through_the_pool(UCX_TCP);
}

#[test]
fn senders_faster_than_the_refill_lose_no_message() {
    suite::pool::senders_faster_than_the_refill_lose_no_message(UCX_TCP);
}

#[test]
fn a_message_longer_than_a_pooled_receive_names_its_sender() {
    suite::pool::a_message_longer_than_a_pooled_receive_names_its_sender(UCX_TCP);
}

/// Rank 1 starts 5 s late: rank 0's bootstrap fence gives up at its
/// bootstrap timeout (1.5 s) with a typed error naming the PMIx call,
/// never a hang.
#[test]
fn a_pmix_fence_a_rank_never_enters_fails_within_the_bootstrap_timeout() {
    let script = r#"if [ "$PMIX_RANK" = 1 ]; then sleep 5; fi; exec "$0" exchange 1"#;
    let vars: Vec<(&str, &str)> = UCX_TCP
        .iter()
        .copied()
        .chain([("FERROVIA_BOOTSTRAP_TIMEOUT_MS", "1500")])
        .collect();
    let started = Instant::now();
    let (code, ranks) = ferrovia_testkit::mpirun(
        "/bin/sh".as_ref(),
        2,
        &["-c", script, RANK_BIN],
        &vars,
        Duration::from_secs(60),
    );
    let took = started.elapsed();
    assert_ne!(code, Some(0));
    let err0 = &ranks[0].1;
    assert!(
        err0.contains("bootstrap failed")
            && err0.contains("every rank to enter the PMIx fence (PMIx_Fence_nb)")
            && err0.contains("1.5s"),
        "{err0}"
    );
    // mpirun ends the job once rank 0 failed: well before rank 1 woke.
    assert!(took < Duration::from_secs(5), "{took:?}");
}

/// A binary built with PMIx support does not link libpmix: without it,
/// it still starts (and meets through rank 0's rendezvous), and under
/// mpirun it fails at once naming the library and the way out.
#[test]
fn without_libpmix_a_rank_still_starts_and_under_mpirun_names_the_library() {
    let ldd = Command::new("ldd").arg(RANK_BIN).output().unwrap();
    let linked = String::from_utf8_lossy(&ldd.stdout);
    assert!(!linked.contains("libpmix"), "{linked}");
    let missing = [("FERROVIA_LIBPMIX", "/nonexistent/libpmix.so.2")];
    let plain: suite::BackendEnv = &[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")];
    run_all(
        plain,
        2,
        &["exchange", "1"],
        &missing,
        Duration::from_secs(120),
    );
    let vars: Vec<(&str, &str)> = UCX_TCP.iter().copied().chain(missing).collect();
    let (code, ranks) = ferrovia_testkit::mpirun(
        RANK_BIN.as_ref(),
        2,
        &["exchange", "1"],
        &vars,
        Duration::from_secs(60),
    );
    assert_ne!(code, Some(0));
    let err = &ranks[0].1;
    assert!(
        err.contains("/nonexistent/libpmix.so.2") && err.contains("FERROVIA_RENDEZVOUS"),
        "{err}"
    );
}

/// A PMIx server that takes the connection and never answers (PMIx's
/// handshake would block for ever): the rank's `PMIx_Init` fails at the
/// bootstrap timeout, naming the call.
#[test]
fn a_pmix_server_that_never_answers_fails_within_the_bootstrap_timeout() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let uri = format!("1.0;tcp4://{}", silent.local_addr().unwrap());
    let holding = std::thread::spawn(move || {
        // Accept, and keep the connection open, answering nothing.
        silent.accept().map(|(s, _)| s).ok()
    });
    let started = Instant::now();
    let out = Command::new(RANK_BIN)
        .args(["exchange", "1"])
        .env("PMIX_RANK", "0")
        .env("PMIX_NAMESPACE", "silent")
        .env("PMIX_SERVER_URI41", &uri)
        .env("PMIX_SERVER_URI4", &uri)
        .env("FERROVIA_BACKEND", "ucx")
        .env("FERROVIA_BOOTSTRAP_TIMEOUT_MS", "1500")
        .env_remove("FERROVIA_RANK")
        .env_remove("FERROVIA_RENDEZVOUS")
        .output()
        .unwrap();
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("waiting for the local PMIx server to answer (PMIx_Init)"),
        "{err}"
    );
    assert!(took < Duration::from_secs(4), "{took:?}");
    drop(holding);
}
