//! The node under Open MPI's `mpirun` on verbs: every rank a process on
//! the VM's soft-RoCE device, bootstrapped through PMIx. Run by `cargo
//! xtask test` (mpirun runs inside the VM).

mod suite;

use suite::MPIRUN;

const VERBS: suite::BackendEnv = &[("FERROVIA_BACKEND", "verbs"), MPIRUN];

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn two_ranks_exchange_with_every_operation() {
    suite::exchange(VERBS, 2, "4");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn four_ranks_exchange_with_every_operation() {
    suite::exchange(VERBS, 4, "2");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_write_with_a_deregistered_key_is_refused() {
    suite::a_write_with_a_deregistered_key_is_refused(VERBS);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn work_with_a_dead_rank_fails_naming_it() {
    suite::work_with_a_dead_rank_fails_naming_it(VERBS);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_flushed_connection_reconnects_and_barriers_pass() {
    suite::reconnect::a_flushed_connection_reconnects_and_barriers_pass(VERBS);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_message_on_a_flushed_connection_never_reaches_the_new_one() {
    suite::reconnect::a_message_on_a_flushed_connection_never_reaches_the_new_one(VERBS);
}
