//! A request that completed with an error status.

use crate::wc_status::WcStatus;

/// A work request that completed with an error status, on any transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("work request {wr_id} completed with {status}")]
pub struct CompletionError {
    /// The `wr_id` the request was posted with.
    pub wr_id: u64,
    /// Its completion status.
    pub status: WcStatus,
    /// The transport's own detail (the verbs vendor syndrome, or the UCX
    /// status), for its documentation.
    pub vendor_err: u32,
}
