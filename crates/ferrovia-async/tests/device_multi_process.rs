//! The multi-process async suite over verbs: soft-RoCE in the VM
//! (`cargo xtask test`), or an RDMA device on the host. Fails, never
//! skips, without one.

mod multi_process;

mod device {
    use super::multi_process;

    const VERBS: multi_process::BackendEnv = &[("FERROVIA_BACKEND", "verbs")];

    #[test]
    #[ignore = "needs an RDMA device: cargo xtask test"]
    fn ten_thousand_operations_across_four_ranks() {
        multi_process::ten_thousand_operations_across_four_ranks(VERBS);
    }

    #[test]
    #[ignore = "needs an RDMA device: cargo xtask test"]
    fn dropped_and_forgotten_futures_leave_canaries_intact() {
        multi_process::dropped_and_forgotten_futures_leave_canaries_intact(VERBS);
    }

    #[test]
    #[ignore = "needs an RDMA device: cargo xtask test"]
    fn fetch_add_and_compare_swap_futures_count_exactly() {
        multi_process::atomics_run_or_are_refused_by_name(VERBS, "atomics ok");
    }

    #[test]
    #[ignore = "needs an RDMA device: cargo xtask test"]
    fn a_killed_peer_is_named_by_every_pending_future() {
        multi_process::a_killed_peer_is_named_by_every_pending_future(VERBS);
    }
}
