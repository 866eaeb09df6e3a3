//! The multi-process suite over UCX on tcp: runs on any host.
#![cfg(feature = "ucx")]

mod suite;

backend_suite!(&[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")]);
