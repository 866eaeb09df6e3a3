//! The multi-process async suite over UCX on tcp: runs on any host.

mod multi_process;

async_suite!(&[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")]);
