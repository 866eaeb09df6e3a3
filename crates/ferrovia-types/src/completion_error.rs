//! A request that completed with an error status.

use crate::wc_status::WcStatus;

/// A work request that completed with an error status, on any transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("work request {wr_id}{} completed with {status}", peer_text(.peer))]
pub struct CompletionError {
    /// The `wr_id` the request was posted with.
    pub wr_id: u64,
    /// Its completion status.
    pub status: WcStatus,
    /// The transport's own detail (the verbs vendor syndrome, or the UCX
    /// status), for its documentation.
    pub vendor_err: u32,
    /// The peer the request went to or came from, where known (the
    /// channel layer knows it; a bare verbs completion does not name it).
    pub peer: Option<u32>,
}

fn peer_text(peer: &Option<u32>) -> String {
    peer.map(|p| format!(" (peer {p})")).unwrap_or_default()
}
