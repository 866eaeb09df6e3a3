//! Store-backed membership on verbs: four members on the VM's soft-RoCE
//! device meet through an etcd the test starts in the VM; rank 2 is
//! killed, drops out within its lease plus 1 s, and a new process takes
//! its rank with new queue pairs. Run by `cargo xtask test`.
#![cfg(feature = "etcd")]

mod membership_common;

use membership_common::{BackendEnv, replace_rank_two};

const VERBS: BackendEnv = &[("FERROVIA_BACKEND", "verbs")];

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_killed_member_drops_out_within_its_lease_and_a_replacement_takes_its_rank() {
    let ttl_ms = 3000;
    let (left_ms, passed_ms) = replace_rank_two(VERBS, ttl_ms);
    println!(
        "kill -> Left at every survivor: {left_ms} ms; kill -> barrier of all four: {passed_ms} ms (lease {ttl_ms} ms)"
    );
    assert!(left_ms <= u128::from(ttl_ms) + 1000, "{left_ms} ms");
}
