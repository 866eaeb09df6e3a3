//! The transfer layer over UCX on tcp (the transport that sees a peer's
//! end): the shared scenarios, and a peer that leaves mid-job. UCX reads
//! `UCX_TLS` once per process, and tests share theirs, so each test runs
//! itself again in a child with `UCX_TLS=tcp`.

mod batches;
mod common;

use std::process::Command;

/// Runs test `name` (whose body is `scenario`) in a child over tcp, or
/// runs `scenario` when this already is that child.
fn on_tcp(name: &str, scenario: fn()) {
    if std::env::var("UCX_TLS").as_deref() == Ok("tcp") {
        return scenario();
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env("UCX_TLS", "tcp")
        .output()
        .expect("run the test again over tcp");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    print!("{stdout}");
    assert!(
        out.status.success(),
        "{name} over tcp failed:\n{stdout}\n{stderr}"
    );
    // The child ran the scenario: not zero tests filtered in.
    assert!(stdout.contains("1 passed"), "{name} did not run:\n{stdout}");
}

#[test]
fn write_read_and_notify_over_two_rails() {
    on_tcp(
        "write_read_and_notify_over_two_rails",
        batches::write_read_and_notify_over_two_rails,
    );
}

#[test]
fn a_deregistered_region_fails_naming_the_entry() {
    on_tcp(
        "a_deregistered_region_fails_naming_the_entry",
        batches::a_deregistered_region_fails_naming_the_entry,
    );
}

#[test]
fn owned_batches_hold_their_lease() {
    on_tcp(
        "owned_batches_hold_their_lease",
        batches::owned_batches_hold_their_lease,
    );
}

#[test]
fn a_lost_rail_moves_its_runs_and_comes_back() {
    on_tcp(
        "a_lost_rail_moves_its_runs_and_comes_back",
        batches::a_lost_rail_moves_its_runs_and_comes_back,
    );
}

#[test]
fn a_peer_that_leaves_is_unreachable_on_every_rail() {
    on_tcp(
        "a_peer_that_leaves_is_unreachable_on_every_rail",
        batches::a_peer_that_leaves_is_unreachable_on_every_rail,
    );
}

#[test]
fn forgotten_batches_free_nothing_under_the_device() {
    on_tcp(
        "forgotten_batches_free_nothing_under_the_device",
        batches::forgotten_batches_free_nothing_under_the_device,
    );
}
