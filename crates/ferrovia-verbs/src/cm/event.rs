//! Connection manager events: their type, and the owned copy ferrovia
//! keeps of each (the library's event is acknowledged as soon as it is
//! read, so no event ever keeps an id from being destroyed).

use std::fmt;

use ferrovia_sys as sys;

use crate::cm::reject_reason::RejectReason;

/// The type of a connection manager event (`enum rdma_cm_event_type`).
///
/// A newtype, not a Rust enum: the value comes from the library, and a
/// newer one may report an event this version does not know.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmEventType(pub u32);

macro_rules! event_types {
    ($($name:ident = $sys:ident,)*) => {
        impl CmEventType {
            $(
                #[doc = concat!("`", stringify!($sys), "`.")]
                pub const $name: CmEventType =
                    CmEventType(sys::rdma_cm_event_type::$sys.0);
            )*

            /// The library's name of the event, if this version knows it.
            pub fn name(self) -> Option<&'static str> {
                $(
                    if self == Self::$name {
                        return Some(stringify!($sys));
                    }
                )*
                None
            }
        }
    };
}

event_types! {
    ADDR_RESOLVED = RDMA_CM_EVENT_ADDR_RESOLVED,
    ADDR_ERROR = RDMA_CM_EVENT_ADDR_ERROR,
    ROUTE_RESOLVED = RDMA_CM_EVENT_ROUTE_RESOLVED,
    ROUTE_ERROR = RDMA_CM_EVENT_ROUTE_ERROR,
    CONNECT_REQUEST = RDMA_CM_EVENT_CONNECT_REQUEST,
    CONNECT_RESPONSE = RDMA_CM_EVENT_CONNECT_RESPONSE,
    CONNECT_ERROR = RDMA_CM_EVENT_CONNECT_ERROR,
    UNREACHABLE = RDMA_CM_EVENT_UNREACHABLE,
    REJECTED = RDMA_CM_EVENT_REJECTED,
    ESTABLISHED = RDMA_CM_EVENT_ESTABLISHED,
    DISCONNECTED = RDMA_CM_EVENT_DISCONNECTED,
    DEVICE_REMOVAL = RDMA_CM_EVENT_DEVICE_REMOVAL,
    MULTICAST_JOIN = RDMA_CM_EVENT_MULTICAST_JOIN,
    MULTICAST_ERROR = RDMA_CM_EVENT_MULTICAST_ERROR,
    ADDR_CHANGE = RDMA_CM_EVENT_ADDR_CHANGE,
    TIMEWAIT_EXIT = RDMA_CM_EVENT_TIMEWAIT_EXIT,
}

impl CmEventType {
    /// Whether the event's connection parameters (private data, depths)
    /// are defined: connect request, connect response, established and
    /// rejected (rdma_get_cm_event(3)).
    pub(crate) fn carries_conn_param(self) -> bool {
        self == Self::CONNECT_REQUEST
            || self == Self::CONNECT_RESPONSE
            || self == Self::ESTABLISHED
            || self == Self::REJECTED
    }
}

impl fmt::Display for CmEventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "RDMA CM event {}", self.0),
        }
    }
}

impl fmt::Debug for CmEventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CmEventType({self})")
    }
}

/// What a connection request or answer offered (`struct rdma_conn_param`
/// as an event reports it; the pointer fields are left out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ConnOffer {
    /// RDMA reads the receiver is asked to accept (the sender's initiator
    /// depth).
    pub(crate) responder_resources: u8,
    /// RDMA reads the receiver may issue (the sender's responder
    /// resources).
    pub(crate) initiator_depth: u8,
    /// The sender's QP number.
    pub(crate) qp_num: u32,
}

/// An event as ferrovia keeps it once the library's copy is acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmEvent {
    kind: CmEventType,
    status: i32,
    private_data: Vec<u8>,
    pub(crate) offer: ConnOffer,
}

impl CmEvent {
    pub(crate) fn new(
        kind: CmEventType,
        status: i32,
        private_data: Vec<u8>,
        offer: ConnOffer,
    ) -> CmEvent {
        CmEvent {
            kind,
            status,
            private_data,
            offer,
        }
    }

    /// The event type.
    pub fn event_type(&self) -> CmEventType {
        self.kind
    }

    /// The event's status: 0, a negative errno, or (for a rejection) the
    /// transport's reason.
    pub fn status(&self) -> i32 {
        self.status
    }

    /// The private data the event carried (connect request, connect
    /// response, established, rejected), as the transport delivered it:
    /// IB and RoCE pad it with zeroes to the message's full size.
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// For a rejection, the reason.
    pub fn reject_reason(&self) -> Option<RejectReason> {
        (self.kind == CmEventType::REJECTED).then_some(RejectReason(self.status))
    }

    pub(crate) fn take_private_data(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.private_data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_library_and_unknown_values_are_kept() {
        assert_eq!(CmEventType::ESTABLISHED.0, 9);
        assert_eq!(
            CmEventType::DISCONNECTED.to_string(),
            "RDMA_CM_EVENT_DISCONNECTED"
        );
        let unknown = CmEventType(77);
        assert_eq!(unknown.name(), None);
        assert_eq!(unknown.to_string(), "RDMA CM event 77");
        assert!(CmEventType::REJECTED.carries_conn_param());
        assert!(!CmEventType::DISCONNECTED.carries_conn_param());
    }

    #[test]
    fn reject_reasons_are_named_and_any_value_is_kept() {
        assert_eq!(
            RejectReason::INVALID_SERVICE_ID.to_string(),
            "invalid service ID (nothing listening) (reason 8)"
        );
        assert_eq!(RejectReason(99).to_string(), "reason 99");
        assert!(RejectReason(-111).to_string().contains("status -111"));
        let ev = CmEvent::new(CmEventType::REJECTED, 28, vec![1], ConnOffer::default());
        assert_eq!(ev.reject_reason(), Some(RejectReason::CONSUMER_DEFINED));
    }
}
