//! The multi-process suite over verbs: every rank a `ferrovia-rank`
//! process sharing the (soft-)RoCE device. Run by `cargo xtask test`.

mod suite;

backend_suite!(
    &[("FERROVIA_BACKEND", "verbs")],
    ignore = "needs an RDMA device: cargo xtask test"
);

// Verbs only until the UCX transport renews endpoints, runs atomics and
// has a shared receive pool.
const VERBS: suite::BackendEnv = &[("FERROVIA_BACKEND", "verbs")];

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_flushed_connection_reconnects_and_barriers_pass() {
    suite::reconnect::a_flushed_connection_reconnects_and_barriers_pass(VERBS);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_reconnect_to_a_dead_rank_fails_within_its_timeout_naming_it() {
    suite::reconnect::a_reconnect_to_a_dead_rank_fails_within_its_timeout_naming_it(VERBS);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn four_ranks_count_exactly_and_a_ticket_lock_loses_no_update() {
    suite::atomics::four_ranks_count_exactly_and_a_ticket_lock_loses_no_update(VERBS);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn all_to_all_through_the_pool() {
    suite::pool::all_to_all_through_the_pool(VERBS);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn senders_faster_than_the_refill_lose_no_message() {
    suite::pool::senders_faster_than_the_refill_lose_no_message(VERBS);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_message_longer_than_a_pooled_receive_names_its_sender() {
    suite::pool::a_message_longer_than_a_pooled_receive_names_its_sender(VERBS);
}
