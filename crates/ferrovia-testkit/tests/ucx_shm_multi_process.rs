//! The multi-process suite over UCX on shared memory (UCX has no peer
//! failure detection there: a dead rank surfaces through timeouts).
#![cfg(feature = "ucx")]

mod suite;

backend_suite!(&[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "sm,self")]);
