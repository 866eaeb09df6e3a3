//! Why a peer's connection manager rejected a connection.

use std::{fmt, io};

/// The reason a connection was rejected: on IB and RoCE the IB CM's REJ
/// reason (a negative errno on iWARP). Values come from the peer and the
/// transport, so any number is representable.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RejectReason(pub i32);

impl RejectReason {
    /// No QP available at the peer.
    pub const NO_QP: RejectReason = RejectReason(1);
    /// The peer ran out of resources.
    pub const NO_RESOURCES: RejectReason = RejectReason(3);
    /// A connection step timed out (also sent by a peer whose requesting
    /// side went away).
    pub const TIMEOUT: RejectReason = RejectReason(4);
    /// Nothing listens on the service (port).
    pub const INVALID_SERVICE_ID: RejectReason = RejectReason(8);
    /// The peer already has a connection in that slot.
    pub const STALE_CONNECTION: RejectReason = RejectReason(10);
    /// The peer cannot give the RDMA read resources asked for.
    pub const INSUFFICIENT_RESPONDER_RESOURCES: RejectReason = RejectReason(27);
    /// The peer's application rejected the request (`rdma_reject`).
    pub const CONSUMER_DEFINED: RejectReason = RejectReason(28);

    /// The reason's name, if it is one of the IB CM's.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            1 => "no QP",
            2 => "no EEC",
            3 => "no resources",
            4 => "timeout",
            5 => "unsupported request",
            6 => "invalid communication ID",
            7 => "invalid communication instance",
            8 => "invalid service ID (nothing listening)",
            9 => "invalid transport type",
            10 => "stale connection",
            11 => "RDC does not exist",
            12 => "invalid GID",
            13 => "invalid LID",
            14 => "invalid SL",
            15 => "invalid traffic class",
            16 => "invalid hop limit",
            17 => "invalid packet rate",
            24 => "port CM redirect",
            25 => "port redirect",
            26 => "invalid MTU",
            27 => "insufficient responder resources",
            28 => "rejected by the peer application",
            29 => "invalid RNR retry",
            30 => "duplicate local communication ID",
            31 => "invalid class version",
            32 => "invalid flow label",
            35 => "vendor option not supported",
            _ => return None,
        })
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} (reason {})", self.0),
            None if self.0 < 0 => write!(f, "{} (status {})", status_text(self.0), self.0),
            None => write!(f, "reason {}", self.0),
        }
    }
}

impl fmt::Debug for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RejectReason({self})")
    }
}

/// An event status as text: a negative errno is named, a transport status
/// is only a number.
pub(crate) fn status_text(status: i32) -> String {
    if status < 0 {
        io::Error::from_raw_os_error(-status).to_string()
    } else {
        format!("transport status {status}")
    }
}
