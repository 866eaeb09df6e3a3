//! The connection manager's error type and the IB CM reject reasons.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::cm::event::CmEventType;
use crate::cm::reject_reason::{RejectReason, status_text};
use crate::error::VerbsError;

/// Result alias of the connection manager.
pub type CmResult<T, E = CmError> = std::result::Result<T, E>;

/// Everything that can go wrong while connecting by address.
///
/// Every variant names the address it was about: the peer for a client,
/// the bound address for a listener, the client for an accepted request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CmError {
    /// A librdmacm call failed.
    #[error("{call} for {addr} failed: {} (errno {errno})", io::Error::from_raw_os_error(*errno))]
    Call {
        /// The call, e.g. `"rdma_listen"`.
        call: &'static str,
        /// The address it was about.
        addr: SocketAddr,
        /// The errno it reported.
        errno: i32,
    },
    /// The address could not be resolved to a local RDMA device and a
    /// destination (`RDMA_CM_EVENT_ADDR_ERROR`, or `rdma_resolve_addr`
    /// refusing it): no route, no RDMA device on the route's netdev, no
    /// neighbour answer.
    #[error("cannot resolve {addr} to an RDMA device: {} (errno {errno})", io::Error::from_raw_os_error(*errno))]
    AddressResolution {
        /// The destination.
        addr: SocketAddr,
        /// Why (a positive errno).
        errno: i32,
    },
    /// No path to the address (`RDMA_CM_EVENT_ROUTE_ERROR`).
    #[error("cannot resolve a route to {addr}: {} (errno {errno})", io::Error::from_raw_os_error(*errno))]
    RouteResolution {
        /// The destination.
        addr: SocketAddr,
        /// Why (a positive errno).
        errno: i32,
    },
    /// The peer's connection manager answered that nothing listens on that
    /// port (IB CM reject reason 8, invalid service ID).
    #[error("nothing listens on {addr} (the peer's connection manager rejected the request)")]
    NotListening {
        /// The destination.
        addr: SocketAddr,
    },
    /// The peer rejected the connection (`RDMA_CM_EVENT_REJECTED`).
    #[error("{addr} rejected the connection: {reason}")]
    Rejected {
        /// The peer.
        addr: SocketAddr,
        /// The transport's reject reason.
        reason: RejectReason,
        /// The private data of the reject message, if the peer sent any
        /// (IB and RoCE pad it with zeroes to 148 bytes).
        private_data: Vec<u8>,
    },
    /// The peer did not answer the connection request
    /// (`RDMA_CM_EVENT_UNREACHABLE`).
    #[error("{addr} is unreachable: {} (status {status})", status_text(*status))]
    Unreachable {
        /// The peer.
        addr: SocketAddr,
        /// The event's status (a negative errno, or a transport status).
        status: i32,
    },
    /// Establishing the connection failed after the peer answered
    /// (`RDMA_CM_EVENT_CONNECT_ERROR`).
    #[error("connecting with {addr} failed: {} (status {status})", status_text(*status))]
    ConnectError {
        /// The peer.
        addr: SocketAddr,
        /// The event's status.
        status: i32,
    },
    /// The peer disconnected (`RDMA_CM_EVENT_DISCONNECTED`) while this side
    /// was still waiting for the connection.
    #[error("{addr} disconnected")]
    Disconnected {
        /// The peer.
        addr: SocketAddr,
    },
    /// A connection request could no longer be answered: the client gave
    /// up or went away before the accept (the kernel drops the events of a
    /// request nobody answered yet, so the next call on it fails, here
    /// `call` with `errno`).
    #[error(
        "the connection request from {addr} was withdrawn ({call} failed: {}): the client gave up or went away",
        io::Error::from_raw_os_error(*errno)
    )]
    RequestWithdrawn {
        /// The client.
        addr: SocketAddr,
        /// The call that found the request gone.
        call: &'static str,
        /// Its errno.
        errno: i32,
    },
    /// The RDMA device went away (`RDMA_CM_EVENT_DEVICE_REMOVAL`).
    #[error("the RDMA device used for {addr} was removed")]
    DeviceRemoved {
        /// The address the connection or listener was for.
        addr: SocketAddr,
    },
    /// The address and port are already bound by another listener.
    #[error("{addr} is already in use by another RDMA CM listener")]
    AddrInUse {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The private data is longer than the connection manager carries.
    #[error("{len} bytes of private data for {what} to {addr}: the limit is {max}")]
    PrivateDataTooLong {
        /// `"rdma_connect"`, `"rdma_accept"` or `"rdma_reject"`.
        what: &'static str,
        /// The address the message was for.
        addr: SocketAddr,
        /// The length given.
        len: usize,
        /// The most the message carries on IB and RoCE.
        max: usize,
    },
    /// A wait reached its deadline.
    #[error("{what} for {addr} timed out after {after:?}")]
    Timeout {
        /// What was being waited for.
        what: &'static str,
        /// The address it was about.
        addr: SocketAddr,
        /// How long the wait lasted.
        after: Duration,
    },
    /// An event arrived that the step in progress cannot follow.
    #[error("{what} for {addr}: unexpected {event} (status {status})")]
    UnexpectedEvent {
        /// The step in progress.
        what: &'static str,
        /// The address it was about.
        addr: SocketAddr,
        /// The event.
        event: CmEventType,
        /// Its status.
        status: i32,
    },
    /// The queue pair is on another device or port than the one the
    /// connection manager routes the address through.
    #[error(
        "{addr} is reached through {cm_device} port {cm_port}, but the queue pair is on {qp_device} port {qp_port}"
    )]
    DeviceMismatch {
        /// The address.
        addr: SocketAddr,
        /// The device the connection manager chose.
        cm_device: String,
        /// Its port.
        cm_port: u8,
        /// The queue pair's device.
        qp_device: String,
        /// The queue pair's port.
        qp_port: u8,
    },
    /// An argument is out of range, or a queue pair is in the wrong state
    /// for the step asked of it.
    #[error("{addr}: {reason}")]
    InvalidArgument {
        /// The address the step was for.
        addr: SocketAddr,
        /// What is wrong.
        reason: String,
    },
    /// A host name did not resolve to a socket address.
    #[error("cannot resolve {host:?} to an address: {reason}")]
    BadAddress {
        /// What was given.
        host: String,
        /// Why it failed.
        reason: String,
    },
    /// A verbs call failed while setting up the connection's queue pair.
    #[error("{addr}: {source}")]
    Verbs {
        /// The address the connection was for.
        addr: SocketAddr,
        /// What failed.
        #[source]
        source: VerbsError,
    },
    /// librdmacm could not be loaded (not installed on this host).
    #[error(transparent)]
    Unavailable(#[from] ferrovia_sys::LoadError),
}

impl CmError {
    /// Whether the error means the peer is gone or never answered: a
    /// rejection, no listener, unreachable, a connect error, a disconnect
    /// or a timeout.
    pub fn is_peer_failure(&self) -> bool {
        matches!(
            self,
            CmError::NotListening { .. }
                | CmError::Rejected { .. }
                | CmError::Unreachable { .. }
                | CmError::ConnectError { .. }
                | CmError::Disconnected { .. }
                | CmError::RequestWithdrawn { .. }
                | CmError::Timeout { .. }
        )
    }

    /// The address the error is about, if it names one.
    pub fn addr(&self) -> Option<SocketAddr> {
        match self {
            CmError::Call { addr, .. }
            | CmError::AddressResolution { addr, .. }
            | CmError::RouteResolution { addr, .. }
            | CmError::NotListening { addr }
            | CmError::Rejected { addr, .. }
            | CmError::Unreachable { addr, .. }
            | CmError::ConnectError { addr, .. }
            | CmError::Disconnected { addr }
            | CmError::RequestWithdrawn { addr, .. }
            | CmError::DeviceRemoved { addr }
            | CmError::AddrInUse { addr }
            | CmError::PrivateDataTooLong { addr, .. }
            | CmError::Timeout { addr, .. }
            | CmError::UnexpectedEvent { addr, .. }
            | CmError::DeviceMismatch { addr, .. }
            | CmError::InvalidArgument { addr, .. }
            | CmError::Verbs { addr, .. } => Some(*addr),
            CmError::BadAddress { .. } | CmError::Unavailable(_) => None,
        }
    }
}

/// librdmacm, loaded on first use; an error says it is not installed.
pub(crate) fn cm_lib() -> CmResult<&'static ferrovia_sys::RdmaCm> {
    Ok(ferrovia_sys::rdmacm()?)
}

/// librdmacm from a destructor: an object that exists was made by the
/// loaded library, so this is `None` only if that invariant broke.
pub(crate) fn cm_loaded() -> Option<&'static ferrovia_sys::RdmaCm> {
    ferrovia_sys::rdmacm().ok()
}

/// The error of a librdmacm call that returned -1 with errno set.
pub(crate) fn call_error(call: &'static str, addr: SocketAddr) -> CmError {
    let errno = crate::error::last_errno().unwrap_or(libc::EIO);
    match (call, errno) {
        ("rdma_bind_addr", libc::EADDRINUSE) => CmError::AddrInUse { addr },
        _ => CmError::Call { call, addr, errno },
    }
}

/// Turns a librdmacm return code (0, or -1 with errno) into a result.
pub(crate) fn check_call(call: &'static str, addr: SocketAddr, ret: i32) -> CmResult<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(call_error(call, addr))
    }
}
