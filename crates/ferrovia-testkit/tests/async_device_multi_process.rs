//! The multi-process async suite over verbs: soft-RoCE in the VM
//! (`cargo xtask test`), or an RDMA device on the host. Fails, never
//! skips, without one.

mod async_suite;

mod device {
    use super::async_suite;

    const VERBS: async_suite::BackendEnv = &[("FERROVIA_BACKEND", "verbs")];

    #[test]
    #[ignore = "needs an RDMA device: cargo xtask test"]
    fn ten_thousand_operations_across_four_ranks() {
        async_suite::ten_thousand_operations_across_four_ranks(VERBS);
    }

    #[test]
    #[ignore = "needs an RDMA device: cargo xtask test"]
    fn dropped_and_forgotten_futures_leave_canaries_intact() {
        async_suite::dropped_and_forgotten_futures_leave_canaries_intact(VERBS);
    }

    #[test]
    #[ignore = "needs an RDMA device: cargo xtask test"]
    fn fetch_add_and_compare_swap_futures_count_exactly() {
        async_suite::atomics_run_or_are_refused_by_name(VERBS, "atomics ok");
    }

    #[test]
    #[ignore = "needs an RDMA device: cargo xtask test"]
    fn a_killed_peer_is_named_by_every_pending_future() {
        async_suite::a_killed_peer_is_named_by_every_pending_future(VERBS);
    }
}
