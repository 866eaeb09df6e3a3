//! A request that completed with an error status.

use crate::wc_status::WcStatus;

/// A work request that completed with an error status, on any transport.
///
/// `peer` names the connection the request was posted on (in a multi-peer
/// channel, the peer's index; in a `Node`, its rank), so an error says whom
/// it concerns without a log line; the channel core fills it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("work request {wr_id}{} completed with {status}", on_peer(peer))]
#[non_exhaustive]
pub struct CompletionError {
    /// The `wr_id` the request was posted with.
    pub wr_id: u64,
    /// Its completion status.
    pub status: WcStatus,
    /// The transport's own detail (the verbs vendor syndrome, or the UCX
    /// status), for its documentation.
    pub vendor_err: u32,
    /// The peer it was posted to (or received from), when known.
    pub peer: Option<usize>,
}

impl CompletionError {
    /// A completion error whose peer is not known (yet).
    pub fn new(wr_id: u64, status: WcStatus, vendor_err: u32) -> CompletionError {
        CompletionError {
            wr_id,
            status,
            vendor_err,
            peer: None,
        }
    }

    /// The same, naming the peer it concerns.
    pub fn with_peer(self, peer: usize) -> CompletionError {
        CompletionError {
            peer: Some(peer),
            ..self
        }
    }
}

fn on_peer(peer: &Option<usize>) -> String {
    peer.map(|p| format!(" with peer {p}")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_peer_when_known() {
        let e = CompletionError::new(7, WcStatus::RETRY_EXC_ERR, 0);
        assert!(
            e.to_string()
                .starts_with("work request 7 completed with IBV_WC_RETRY_EXC_ERR"),
            "{e}"
        );
        let e = e.with_peer(2);
        assert!(
            e.to_string()
                .starts_with("work request 7 with peer 2 completed with IBV_WC_RETRY_EXC_ERR"),
            "{e}"
        );
        assert_eq!(e.peer, Some(2));
    }
}
