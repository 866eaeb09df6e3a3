//! Transports of one peer connected by socket address: a client's
//! (`ucp_ep_create` with the listener's address) and a server's (with a
//! client's connection request from a [`UcxListener`](crate::UcxListener)),
//! and the handshake messages their owners trade before the first post
//! (UCX's own handshake carries no application data).

use std::fmt;
use std::net::SocketAddr;

use crate::context::UcxContext;
use crate::control::HANDSHAKE_MAX;
use crate::engine::EpTarget;
use crate::error::UcxError;
use crate::ffi;
use crate::listener::UcxConnRequest;
use crate::sockaddr::RawSockAddr;
use crate::transport::{UcxTransport, UcxTransportBuilder};

impl UcxTransportBuilder {
    /// A transport of one peer (index 0) connected to the listener at
    /// `addr` (`ucp_ep_create` with the socket address; UCX's connection
    /// manager, tcp here, must reach it). Returns once the endpoint
    /// exists: whether anyone listens shows as
    /// [`UcxTransport::peer_failure`], or as the failure of the first
    /// message.
    pub fn connect_to(
        self,
        context: &UcxContext,
        addr: SocketAddr,
    ) -> Result<UcxTransport, UcxError> {
        let mut t = self.start(context)?;
        let raw = RawSockAddr::new(&addr);
        t.engine
            .lock()
            .connect_by_address(EpTarget::SockAddr(&raw), addr)?;
        t.connected_by_address(addr);
        Ok(t)
    }

    /// A transport of one peer (index 0) connected to the client of
    /// `request` (`ucp_ep_create` with it, on this transport's worker).
    pub fn accept(
        self,
        context: &UcxContext,
        request: UcxConnRequest,
    ) -> Result<UcxTransport, UcxError> {
        let client = request.client_addr();
        let mut t = self.start(context)?;
        request.consume(|raw| {
            t.engine
                .lock()
                .connect_by_address(EpTarget::Request(raw), client)
        })?;
        t.connected_by_address(client);
        Ok(t)
    }
}

impl UcxTransport {
    fn connected_by_address(&mut self, addr: SocketAddr) {
        let _ = self.peers.set(1);
        self.peer_addr = Some(addr);
        self.wake_progress();
    }

    /// The peer's address, for a transport connected by address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer_addr
    }

    /// Sends a handshake message (at most 256 bytes) to the peer of a
    /// transport connected by address, on the control channel: ordered
    /// with the other handshake messages, not with posted work.
    pub fn send_handshake(&self, bytes: &[u8]) -> Result<(), UcxError> {
        if bytes.len() > HANDSHAKE_MAX {
            return Err(UcxError::HandshakeTooLong {
                len: bytes.len(),
                max: HANDSHAKE_MAX,
            });
        }
        if self.peer_addr.is_none() {
            return Err(UcxError::NotConnected);
        }
        self.engine.lock().send_handshake(bytes.to_vec());
        self.wake_progress();
        Ok(())
    }

    /// The oldest handshake message received and not yet taken (the
    /// progress thread receives them; at most four are kept, and more are
    /// dropped as malformed).
    pub fn take_handshake(&self) -> Option<Vec<u8>> {
        self.engine.lock().take_handshake()
    }

    /// Why the endpoint to the peer failed, if it did (not by this side's
    /// own flush): for a client, whether anything listens at the address.
    pub fn peer_failure(&self) -> Option<EndpointFailure> {
        self.engine
            .lock()
            .peer_failure(0)
            .map(EndpointFailure::from_status)
    }
}

/// Why an endpoint failed, from UCX's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndpointFailure {
    /// No connection could be made: nothing listens at the address, or
    /// no route leads there (`UCS_ERR_NOT_CONNECTED`, from the tcp
    /// connection manager's refused or failed connect).
    NotConnected,
    /// The listener rejected the request (`UCS_ERR_REJECTED`).
    Rejected,
    /// The address cannot be reached (`UCS_ERR_UNREACHABLE`): no route or
    /// no host answers there (the tcp connection manager's
    /// `ENETUNREACH` / `EHOSTUNREACH`), or no UCX transport reaches it
    /// (`UCX_TLS` without a connection manager such as tcp).
    Unreachable,
    /// The peer closed or reset the connection
    /// (`UCS_ERR_CONNECTION_RESET`).
    Reset,
    /// The peer stopped answering (`UCS_ERR_ENDPOINT_TIMEOUT`,
    /// `UCS_ERR_TIMED_OUT`).
    TimedOut,
    /// Another status.
    Other(i8),
}

impl EndpointFailure {
    fn from_status(status: ffi::ucs_status_t) -> EndpointFailure {
        match status {
            ffi::UCS_ERR_NOT_CONNECTED => EndpointFailure::NotConnected,
            ffi::UCS_ERR_REJECTED => EndpointFailure::Rejected,
            ffi::UCS_ERR_UNREACHABLE => EndpointFailure::Unreachable,
            ffi::UCS_ERR_CONNECTION_RESET => EndpointFailure::Reset,
            ffi::UCS_ERR_ENDPOINT_TIMEOUT | ffi::UCS_ERR_TIMED_OUT => EndpointFailure::TimedOut,
            other => EndpointFailure::Other(other),
        }
    }

    /// The UCX status it came from (for the endpoint-level statuses, the
    /// representative one).
    pub fn status(self) -> i8 {
        match self {
            EndpointFailure::NotConnected => ffi::UCS_ERR_NOT_CONNECTED,
            EndpointFailure::Rejected => ffi::UCS_ERR_REJECTED,
            EndpointFailure::Unreachable => ffi::UCS_ERR_UNREACHABLE,
            EndpointFailure::Reset => ffi::UCS_ERR_CONNECTION_RESET,
            EndpointFailure::TimedOut => ffi::UCS_ERR_ENDPOINT_TIMEOUT,
            EndpointFailure::Other(s) => s,
        }
    }
}

impl fmt::Display for EndpointFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            EndpointFailure::NotConnected => "could not connect (nothing listening, or no route)",
            EndpointFailure::Rejected => "the listener rejected the request",
            EndpointFailure::Unreachable => "the address cannot be reached",
            EndpointFailure::Reset => "the peer closed the connection",
            EndpointFailure::TimedOut => "the peer stopped answering",
            EndpointFailure::Other(_) => "the endpoint failed",
        };
        write!(f, "{what} (ucs_status_t {})", self.status())
    }
}
