//! Transports of one peer connected by address: the endpoint comes from
//! the peer's worker address, which the owners traded through a front
//! door of their own (ferrovia-node's `Listener`: bounded, framed, plain
//! TCP), so no byte of a stranger's reaches UCX's socket connection
//! manager, which aborts the process on malformed ones. That front door's
//! connection can stay with the transport as its link (see
//! `engine::link`).

use std::fmt;
use std::net::{SocketAddr, TcpStream};

use crate::error::UcxError;
use crate::transport::UcxTransport;
use crate::ucp::Status;

impl UcxTransport {
    /// Connects this transport's one peer (index 0; this side is 0 to it
    /// too) by its worker address (`worker`: what its
    /// [`UcxTransport::address`] returned), for a connection made by
    /// address: `addr` names the peer in errors and in
    /// `Transport::disconnected`. Once only.
    pub fn connect_peer(&mut self, worker: &[u8], addr: SocketAddr) -> Result<(), UcxError> {
        if self.peers.get().is_some() {
            return Err(UcxError::AlreadyConnected);
        }
        self.engine.lock().connect_by_address(worker, addr)?;
        let _ = self.peers.set(1);
        self.peer_addr = Some(addr);
        self.wake_progress();
        Ok(())
    }

    /// Watches `link`, the owner's open connection to the peer of a
    /// connection made by address: when the peer closes or resets it, the
    /// peer is gone and its work fails (UCX 1.13's shared memory cannot
    /// tell that a peer went away). Bytes the peer sends on it are
    /// dropped.
    pub fn watch_link(&self, link: TcpStream) -> Result<(), UcxError> {
        if self.peer_addr.is_none() {
            return Err(UcxError::NotConnected);
        }
        self.engine
            .lock()
            .set_link(link)
            .map_err(|e| UcxError::ProgressThread(format!("cannot watch the link: {e}")))?;
        self.wake_progress();
        Ok(())
    }

    /// The peer's address, for a transport connected by address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer_addr
    }

    /// Why the endpoint to the peer failed, if it did (not by this side's
    /// own flush).
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
    fn from_status(status: Status) -> EndpointFailure {
        match status {
            Status::NOT_CONNECTED => EndpointFailure::NotConnected,
            Status::REJECTED => EndpointFailure::Rejected,
            Status::UNREACHABLE => EndpointFailure::Unreachable,
            Status::CONNECTION_RESET => EndpointFailure::Reset,
            Status::ENDPOINT_TIMEOUT | Status::TIMED_OUT => EndpointFailure::TimedOut,
            other => EndpointFailure::Other(other.code()),
        }
    }

    /// The UCX status it came from (for the endpoint-level statuses, the
    /// representative one).
    pub fn status(self) -> i8 {
        match self {
            EndpointFailure::NotConnected => Status::NOT_CONNECTED.code(),
            EndpointFailure::Rejected => Status::REJECTED.code(),
            EndpointFailure::Unreachable => Status::UNREACHABLE.code(),
            EndpointFailure::Reset => Status::CONNECTION_RESET.code(),
            EndpointFailure::TimedOut => Status::ENDPOINT_TIMEOUT.code(),
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
