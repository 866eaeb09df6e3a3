//! The multi-process async suite over UCX on tcp: runs on any host.

mod async_suite;

async_suite!(&[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")]);
