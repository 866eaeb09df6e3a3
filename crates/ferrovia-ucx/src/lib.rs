//! UCX fallback transport for ferrovia.
//!
//! Contract (filled in by the UCX work): implements the channel core's
//! transport seam over UCX (tcp, shared memory, or UCX's own RDMA
//! transports), so a ferrovia program runs unchanged on machines without an
//! RDMA device. In-flight operations own what UCX may still touch.
