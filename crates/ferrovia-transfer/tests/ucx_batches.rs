//! The transfer layer over UCX on this host: two ranks as threads, two
//! rails each, on UCX's default for a one-host job (shared memory).

mod batches;
mod common;

#[test]
fn write_read_and_notify_over_two_rails() {
    batches::write_read_and_notify_over_two_rails();
}

#[test]
fn bad_input_is_typed() {
    batches::bad_input_is_typed();
}

#[test]
fn a_deregistered_region_fails_naming_the_entry() {
    batches::a_deregistered_region_fails_naming_the_entry();
}

#[test]
fn owned_batches_hold_their_lease() {
    batches::owned_batches_hold_their_lease();
}

#[test]
fn a_lost_rail_moves_its_runs_and_comes_back() {
    batches::a_lost_rail_moves_its_runs_and_comes_back();
}

#[test]
fn forgotten_batches_free_nothing_under_the_device() {
    batches::forgotten_batches_free_nothing_under_the_device();
}
