//! The transfer layer over UCX on tcp (the transport that sees a peer's
//! end): the shared scenarios, and a peer that leaves mid-job. UCX reads
//! `UCX_TLS` once per process, and tests share theirs, so each test runs
//! itself again in a child with `UCX_TLS=tcp`.

mod batches;
mod common;

/// Runs test `name` (whose body is `scenario`) in a child over tcp, or
/// runs `scenario` when this already is that child.
fn on_tcp(name: &str, scenario: fn()) {
    ferrovia_testkit::in_child_with(name, ("UCX_TLS", "tcp"), scenario);
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
