//! Connecting by address: the RDMA connection manager (librdmacm, feature
//! `cm`).
//!
//! A server binds a [`CmListener`] to an address and port and accepts
//! [`CmIncoming`]s as clients come; a client that knows only the address
//! calls [`cm_connect`] (or a [`CmConnector`]). Either side gets a
//! [`CmConnection`]: a connected RC [`QueuePair`](crate::QueuePair) with
//! its CQ and PD, and a [`CmLink`] that reports what happens to the
//! connection afterwards (the peer's disconnect above all). Both sides
//! send private data with their message (at most
//! [`CONNECT_PRIVATE_DATA_MAX`] bytes in a request, [`ACCEPT_PRIVATE_DATA_MAX`]
//! in an answer, [`REJECT_PRIVATE_DATA_MAX`] in a rejection on IB and RoCE;
//! more is a [`CmError::PrivateDataTooLong`] before anything is sent). The
//! peers need not run ferrovia: `rdma_client`/`rdma_server` and `rping`
//! interoperate (see the `cm_*` examples).
//!
//! # Queue pairs are ferrovia's own
//!
//! The connection manager never owns a queue pair here: ferrovia creates
//! it with `ibv_create_qp` in any PD the caller likes (the same PD and CQ
//! as its other connections, for a channel) and moves it through INIT,
//! RTR and RTS with the attributes the connection manager computes
//! (`rdma_init_qp_attr`), then completes the handshake itself
//! (`rdma_accept` after RTS on the passive side; `rdma_establish` after
//! the answer on the active side), as librdmacm does inside for a QP it
//! made and as `rping -q` does. So a connection's QP is an ordinary
//! [`QueuePair`](crate::QueuePair), in a PD that need not come from
//! librdmacm's device context, and it never depends on the CM id: the id
//! can be destroyed while the QP drains, and the QP dropped while the id
//! lives, in any order. The costs: the caller (or [`CmConnection`]) must
//! flush the QP on a disconnect, which `rdma_disconnect` would do for a
//! QP librdmacm owned, and the QP must be on the device and port the
//! address resolves to (checked: [`CmError::DeviceMismatch`]).
//!
//! # Waits and events
//!
//! Every id has an event channel of its own, its fd non-blocking; waits
//! poll it with the time left and every call that waits takes a timeout.
//! Events are copied and acknowledged as soon as they are read. A
//! request's id is moved off the listener's channel as it is handed out,
//! so requests and connections never see each other's events.
//!
//! ```no_run
//! use std::time::Duration;
//! use ferrovia_verbs::cm::{CmListener, cm_connect};
//!
//! # fn main() -> Result<(), ferrovia_verbs::cm::CmError> {
//! let t = Duration::from_secs(5);
//! let listener = CmListener::bind("192.168.77.1:0".parse().unwrap())?;
//! let addr = listener.local_addr();
//! let client = std::thread::spawn(move || cm_connect(addr, b"hello", t));
//! let server_side = listener.accept(t)?.accept(b"welcome", t)?;
//! let client_side = client.join().unwrap()?;
//! assert!(server_side.private_data().starts_with(b"hello"));
//! assert!(client_side.private_data().starts_with(b"welcome"));
//! # Ok(())
//! # }
//! ```

mod addr;
mod channel;
mod connector;
mod error;
mod event;
mod id;
mod link;
mod listener;
mod outcome;
mod params;
mod qp_state;
mod reject_reason;
mod resources;

pub use connector::{CmConnector, CmResolved, cm_connect};
pub use error::{CmError, CmResult};
pub use event::{CmEvent, CmEventType};
pub use link::{CmConnection, CmLink};
pub use listener::{CmIncoming, CmListener, CmListenerBuilder};
pub use params::{
    ACCEPT_PRIVATE_DATA_MAX, CONNECT_PRIVATE_DATA_MAX, CmParams, REJECT_PRIVATE_DATA_MAX,
};
pub use reject_reason::RejectReason;
pub use resources::CmResources;
