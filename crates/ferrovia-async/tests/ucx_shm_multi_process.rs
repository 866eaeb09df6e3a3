//! The multi-process async suite over UCX's shared memory: runs on any
//! host.

mod multi_process;

async_suite!(&[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "sm,self")]);
