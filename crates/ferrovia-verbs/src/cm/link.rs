//! An established connection's connection-manager half ([`CmLink`]: its
//! id and events) and a whole connection ([`CmConnection`]: the link with
//! the verbs objects it connected).

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::cm::error::{CmError, CmResult};
use crate::cm::event::{CmEvent, CmEventType};
use crate::cm::id::CmId;
use crate::cm::qp_state;
use crate::cm::resources::CmResources;
use crate::cq::CompletionQueue;
use crate::pd::ProtectionDomain;
use crate::qp::QueuePair;

/// The connection manager's side of an established connection: the id,
/// the peer's private data, and the events that follow (the peer's
/// disconnect above all).
///
/// It does not own the queue pair it connected (the QP never depends on
/// it): when [`CmLink::poll_event`] or [`CmLink::wait_event`] reports
/// [`CmEventType::DISCONNECTED`], fail the pending work by moving the QP
/// to the error state ([`QueuePair::to_error`]); the link answers the
/// peer's disconnect itself. Dropping the link disconnects (the peer sees
/// `DISCONNECTED`).
#[derive(Debug)]
pub struct CmLink {
    id: CmId,
    peer: SocketAddr,
    local: SocketAddr,
    device: String,
    port: u8,
    private_data: Vec<u8>,
    disconnected: AtomicBool,
}

impl CmLink {
    pub(crate) fn new(id: CmId, peer: SocketAddr, private_data: Vec<u8>) -> CmLink {
        let local = id.local_addr().unwrap_or(peer);
        let device = id.device_name().unwrap_or_default();
        let port = id.port_num();
        CmLink {
            id,
            peer,
            local,
            device,
            port,
            private_data,
            disconnected: AtomicBool::new(false),
        }
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// This side's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The RDMA device the connection runs on.
    pub fn device_name(&self) -> &str {
        &self.device
    }

    /// The device port the connection runs on.
    pub fn port_num(&self) -> u8 {
        self.port
    }

    /// The private data the peer sent: its connect request's (on the
    /// accepting side) or its accept's (on the connecting side). IB and
    /// RoCE deliver the message's whole private area (56 or 196 bytes),
    /// zero-padded past what the peer wrote: a protocol that needs the
    /// exact length must carry it.
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// Whether a `DISCONNECTED` event has been seen (or
    /// [`CmLink::disconnect`] called).
    pub fn is_disconnected(&self) -> bool {
        self.disconnected.load(Ordering::Acquire)
    }

    /// Records a disconnect and answers it: the peer's disconnect
    /// completes (its `DISCONNECTED` arrives) once this side has answered
    /// with its own `rdma_disconnect`.
    fn note(&self, ev: &CmEvent) {
        if ev.event_type() == CmEventType::DISCONNECTED
            && !self.disconnected.swap(true, Ordering::AcqRel)
            && let Err(e) = self.id.disconnect(self.peer)
        {
            tracing::debug!("answering the disconnect of {}: {e}", self.peer);
        }
    }

    /// The next event, if one is pending; never blocks.
    pub fn poll_event(&self) -> CmResult<Option<CmEvent>> {
        let ev = self.id.channel().try_next(self.peer)?.map(|raw| raw.event);
        if let Some(ev) = &ev {
            self.note(ev);
        }
        Ok(ev)
    }

    /// Waits up to `timeout` for the next event.
    pub fn wait_event(&self, timeout: Duration) -> CmResult<CmEvent> {
        let deadline = ferrovia_types::deadline_after(timeout);
        let ev = self
            .id
            .channel()
            .next(deadline, "waiting for a connection event", self.peer)?
            .event;
        self.note(&ev);
        Ok(ev)
    }

    /// Waits up to `timeout` until the peer has disconnected; other events
    /// on the way are skipped. Returns at once if that was already seen.
    pub fn wait_disconnected(&self, timeout: Duration) -> CmResult<()> {
        let deadline = ferrovia_types::deadline_after(timeout);
        while !self.is_disconnected() {
            let ev = self
                .id
                .channel()
                .next(
                    deadline,
                    "waiting for RDMA_CM_EVENT_DISCONNECTED",
                    self.peer,
                )?
                .event;
            if ev.event_type() == CmEventType::DEVICE_REMOVAL {
                return Err(CmError::DeviceRemoved { addr: self.peer });
            }
            self.note(&ev);
        }
        Ok(())
    }

    /// Starts disconnecting: the peer sees `DISCONNECTED`, and this side
    /// too once the peer has answered (ferrovia answers when it reads the
    /// event; a peer that never reads its events is answered for by its
    /// connection manager's timeout). The QP is not touched: move it to
    /// the error state to flush its work.
    pub fn disconnect(&self) -> CmResult<()> {
        self.id.disconnect(self.peer)
    }
}

impl AsRawFd for CmLink {
    /// The event channel's fd (non-blocking): readable when an event is
    /// pending, for a caller that sleeps on many links at once.
    fn as_raw_fd(&self) -> RawFd {
        self.id.channel().as_raw_fd()
    }
}

/// An established RC connection: the queue pair (with its CQ and PD) and
/// the link that reports what happens to the connection.
///
/// Dropping it destroys the QP and disconnects, in either order.
#[derive(Debug)]
pub struct CmConnection {
    resources: CmResources,
    link: CmLink,
}

impl CmConnection {
    pub(crate) fn new(resources: CmResources, link: CmLink) -> CmConnection {
        CmConnection { resources, link }
    }

    /// The connected queue pair.
    pub fn qp(&self) -> &QueuePair {
        &self.resources.qp
    }

    /// The completion queue of its sends and receives.
    pub fn cq(&self) -> &CompletionQueue {
        &self.resources.cq
    }

    /// Its protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.resources.pd
    }

    /// The connection manager's side: addresses, the peer's private data,
    /// events.
    pub fn link(&self) -> &CmLink {
        &self.link
    }

    /// The peer's private data (see [`CmLink::private_data`]).
    pub fn private_data(&self) -> &[u8] {
        self.link.private_data()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.link.peer_addr()
    }

    /// Flushes the QP (its outstanding work completes with
    /// `IBV_WC_WR_FLUSH_ERR`) and disconnects, as `rdma_disconnect` does
    /// for a QP librdmacm owns.
    pub fn disconnect(&self) -> CmResult<()> {
        let flushed = self
            .resources
            .qp
            .to_error()
            .map_err(|source| CmError::Verbs {
                addr: self.link.peer_addr(),
                source,
            });
        let disconnected = self.link.disconnect();
        flushed.and(disconnected)
    }

    /// Splits the connection into its verbs objects and its link.
    pub fn into_parts(self) -> (CmResources, CmLink) {
        (self.resources, self.link)
    }
}

/// Gives a failed connection's QP back only after flushing it.
pub(crate) fn fail_qp<T>(qp: &QueuePair, result: CmResult<T>) -> CmResult<T> {
    if result.is_err() {
        qp_state::abandon(qp);
    }
    result
}
