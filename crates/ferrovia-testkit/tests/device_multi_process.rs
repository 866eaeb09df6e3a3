//! The multi-process suite over verbs: every rank a `ferrovia-rank`
//! process sharing the (soft-)RoCE device. Run by `cargo xtask test`.

mod suite;

backend_suite!(
    &[("FERROVIA_BACKEND", "verbs")],
    ignore = "needs an RDMA device: cargo xtask test"
);
