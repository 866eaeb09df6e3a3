//! The UCX layer's error type.

use std::net::SocketAddr;

/// A UCX call failed, or an operation did not finish in time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UcxError {
    /// A UCX function returned an error status.
    #[error("{op} failed: {message} (ucs_status_t {status})")]
    Status {
        /// The UCX function.
        op: &'static str,
        /// The status code.
        status: i8,
        /// UCX's own description.
        message: String,
    },
    /// The progress thread could not start, or is gone.
    #[error("UCX progress thread: {0}")]
    ProgressThread(String),
    /// Creating the endpoint to one peer failed.
    #[error("cannot create the endpoint to peer {peer}: {source}")]
    Endpoint {
        /// The peer.
        peer: usize,
        /// Why.
        #[source]
        source: Box<UcxError>,
    },
    /// `ucp_mem_map(ALLOCATE)` returned memory that is too short, NULL or
    /// not page-aligned.
    #[error("ucp_mem_map allocated {got} bytes at {addr:#x} for {asked}, unaligned or too short")]
    UnusableAllocation {
        /// Bytes asked for.
        asked: usize,
        /// Bytes UCX reported.
        got: usize,
        /// Where.
        addr: usize,
    },
    /// `connect` was called twice.
    #[error("the UCX transport is already connected")]
    AlreadyConnected,
    /// The peer list of `connect` is unusable.
    #[error("cannot connect rank {me} among {peers} peers")]
    BadPeers {
        /// This side's index.
        me: usize,
        /// How many addresses were given.
        peers: usize,
    },
    /// `reconnect` of a peer whose side was not renewed first.
    #[error("the connection to peer {peer} was not renewed before reconnecting it")]
    NotRenewed {
        /// The peer.
        peer: usize,
    },
    /// The transport is used before `connect`.
    #[error("the UCX transport is not connected yet")]
    NotConnected,
    /// A UCX call about a socket address failed.
    #[error("{op} for {addr} failed: {message} (ucs_status_t {status})")]
    Addr {
        /// The UCX function.
        op: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The status code.
        status: i8,
        /// UCX's own description.
        message: String,
    },
    /// A configuration option name or value contains a NUL byte.
    #[error("UCX option {name:?} is not a valid C string")]
    InvalidOption {
        /// The option.
        name: String,
    },
    /// A posted element names a rebased registration this transport does
    /// not hold, or bytes outside it.
    #[error("{len} bytes at RDMA address {addr:#x} are not in a live registration of key {key:#x}")]
    UnknownLocalBuffer {
        /// The element's key.
        key: u32,
        /// Its RDMA address.
        addr: u64,
        /// Its length.
        len: u32,
    },
}

impl UcxError {
    /// The peer an error concerns, when it names one.
    pub fn peer(&self) -> Option<usize> {
        match self {
            UcxError::Endpoint { peer, .. } => Some(*peer),
            _ => None,
        }
    }
}
