//! What can go wrong connecting by address, on either backend: each error
//! names the address it is about.

use std::net::SocketAddr;
use std::time::Duration;

/// Everything that can go wrong listening, accepting or connecting by
/// address. Every variant names an address: the peer's for a client, the
/// bound one for a listener, the client's for an accepted request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// Nothing listens at the address (verbs: the peer's connection
    /// manager answered "invalid service ID"; UCX: the TCP connection was
    /// refused). A listener on the other backend is nothing to this side:
    /// both ends must run the same backend.
    #[error(
        "nothing listens on {addr} (on the {backend} backend; a listener on the other backend does not count)"
    )]
    NotListening {
        /// The address.
        addr: SocketAddr,
        /// This side's backend.
        backend: crate::Backend,
    },
    /// The peer's application rejected the connection
    /// ([`Incoming::reject`](crate::Incoming::reject)), with this private
    /// data.
    #[error("{addr} rejected the connection ({} bytes of private data)", private_data.len())]
    Rejected {
        /// The peer.
        addr: SocketAddr,
        /// What it sent with the rejection (exactly, from a ferrovia peer;
        /// the whole zero-padded area from another).
        private_data: Vec<u8>,
    },
    /// The peer's side turned the request away before its application saw
    /// it (verbs: a connection manager reject reason other than the
    /// application's; UCX: the listener had too many pending requests).
    #[error("{addr} refused the connection: {reason}")]
    Refused {
        /// The peer.
        addr: SocketAddr,
        /// Why, as the transport said it.
        reason: String,
    },
    /// No route leads to the address, or it does not resolve to a local
    /// RDMA device (verbs), or no UCX transport reaches it.
    #[error("{addr} is unreachable: {reason}")]
    Unreachable {
        /// The address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// Another listener holds the address and port.
    #[error("{addr} is already in use by another listener")]
    AddrInUse {
        /// The address.
        addr: SocketAddr,
    },
    /// More private data than the message carries (the same limits on
    /// both backends: [`CONNECT_DATA_MAX`](crate::CONNECT_DATA_MAX),
    /// [`ACCEPT_DATA_MAX`](crate::ACCEPT_DATA_MAX),
    /// [`REJECT_DATA_MAX`](crate::REJECT_DATA_MAX)); nothing was sent.
    #[error("{len} bytes of private data in the {what} for {addr}: at most {max}")]
    PrivateDataTooLong {
        /// `"connect request"`, `"accept"` or `"reject"`.
        what: &'static str,
        /// The address the message was for.
        addr: SocketAddr,
        /// The length given.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A wait reached its deadline.
    #[error("{what} on {addr} timed out after {after:?}")]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// The address it was about.
        addr: SocketAddr,
        /// How long it waited.
        after: Duration,
    },
    /// The peer went away before the connection was established.
    #[error("{addr} went away while connecting: {reason}")]
    Disconnected {
        /// The peer.
        addr: SocketAddr,
        /// What the transport said.
        reason: String,
    },
    /// The peer does not speak ferrovia's connection handshake (or
    /// another version of it).
    #[error("{addr} broke the connection handshake: {reason}")]
    Protocol {
        /// The peer.
        addr: SocketAddr,
        /// What was wrong.
        reason: String,
    },
    /// The backend asked for is not in this build (its feature is off).
    #[error("{addr}: the {backend} backend was asked for, but ferrovia-node was built without it")]
    NotBuilt {
        /// The address it was about.
        addr: SocketAddr,
        /// The backend asked for.
        backend: crate::Backend,
    },
    /// The backend failed otherwise (its own typed error inside).
    #[error("{addr}: {source}")]
    Backend {
        /// The address it was about.
        addr: SocketAddr,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl ConnectError {
    /// The address the error is about.
    pub fn addr(&self) -> SocketAddr {
        match self {
            ConnectError::NotListening { addr, .. }
            | ConnectError::Rejected { addr, .. }
            | ConnectError::Refused { addr, .. }
            | ConnectError::Unreachable { addr, .. }
            | ConnectError::AddrInUse { addr }
            | ConnectError::PrivateDataTooLong { addr, .. }
            | ConnectError::Timeout { addr, .. }
            | ConnectError::Disconnected { addr, .. }
            | ConnectError::Protocol { addr, .. }
            | ConnectError::NotBuilt { addr, .. }
            | ConnectError::Backend { addr, .. } => *addr,
        }
    }

    pub(crate) fn backend(
        addr: SocketAddr,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> ConnectError {
        ConnectError::Backend {
            addr,
            source: source.into(),
        }
    }
}
