//! The accepting side: a listener bound to an address and port, and the
//! connection requests it hands out, each accepted or rejected on its own.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::cm::error::{CmError, CmResult};
use crate::cm::event::{CmEventType, ConnOffer};
use crate::cm::id::CmId;
use crate::cm::link::{CmConnection, CmLink, fail_qp};
use crate::cm::outcome::{expect, explain};
use crate::cm::params::{CmParams, Depths, check_private_data};
use crate::cm::qp_state::{self, check_device};
use crate::cm::resources::{CmResources, ResourceOptions};
use crate::pd::ProtectionDomain;
use crate::qp::{QpCaps, QpState, QueuePair};

/// What a listener's requests share: how their verbs objects are made,
/// and one PD per device, so every connection of the listener can use
/// memory registered once.
#[derive(Debug)]
struct Shared {
    resources: ResourceOptions,
    params: CmParams,
    pds: Mutex<Vec<ProtectionDomain>>,
}

impl Shared {
    /// The listener's PD on `device`: the one it was given, else the one
    /// made for the device's first connection.
    fn pd_for(&self, device: &str) -> Option<ProtectionDomain> {
        if self.resources.pd.is_some() {
            return self.resources.pd.clone();
        }
        let pds = self.pds.lock().unwrap_or_else(PoisonError::into_inner);
        pds.iter().find(|pd| pd.context().name() == device).cloned()
    }

    fn remember(&self, pd: &ProtectionDomain) {
        let mut pds = self.pds.lock().unwrap_or_else(PoisonError::into_inner);
        if !pds
            .iter()
            .any(|p| p.context().name() == pd.context().name())
        {
            pds.push(pd.clone());
        }
    }
}

/// Settings of a listener.
#[derive(Debug, Clone)]
pub struct CmListenerBuilder {
    addr: SocketAddr,
    backlog: i32,
    resources: ResourceOptions,
    params: CmParams,
}

impl CmListenerBuilder {
    /// How many requests may wait to be accepted (default 64).
    pub fn backlog(mut self, backlog: u16) -> Self {
        self.backlog = i32::from(backlog);
        self
    }

    /// Make the connections' QPs in this PD (on the device requests arrive
    /// on); default: one PD per device, made at the first request.
    pub fn pd(mut self, pd: &ProtectionDomain) -> Self {
        self.resources.pd = Some(pd.clone());
        self
    }

    /// Queue sizes of the connections' QPs.
    pub fn caps(mut self, caps: QpCaps) -> Self {
        self.resources.caps = caps;
        self
    }

    /// Read depths, retries and the RNR timer of accepted connections.
    pub fn params(mut self, params: CmParams) -> Self {
        self.params = params;
        self
    }

    /// Binds the address (`rdma_bind_addr`; port 0 picks a free one) and
    /// listens (`rdma_listen`).
    pub fn bind(self) -> CmResult<CmListener> {
        let addr = self.addr;
        self.params.validate(addr)?;
        let mut id = CmId::new(addr)?;
        id.bind(addr)?;
        id.listen(addr, self.backlog)?;
        let local = id.local_addr().unwrap_or(addr);
        tracing::debug!("RDMA CM: listening on {local}");
        Ok(CmListener {
            id,
            local,
            shared: Arc::new(Shared {
                resources: self.resources,
                params: self.params,
                pds: Mutex::new(Vec::new()),
            }),
        })
    }
}

/// Listens for RC connection requests on an address and port.
///
/// [`CmListener::accept`] hands out each request as it arrives, in any
/// order; each [`CmIncoming`] then lives on its own (its events never pass
/// through the listener), so a client that connects and vanishes fails
/// only its own request. Dropping the listener stops listening; requests
/// and connections it handed out live on.
#[derive(Debug)]
pub struct CmListener {
    id: CmId,
    local: SocketAddr,
    shared: Arc<Shared>,
}

impl CmListener {
    /// Binds `addr` with the default settings (see
    /// [`CmListenerBuilder::bind`]).
    pub fn bind(addr: SocketAddr) -> CmResult<CmListener> {
        CmListener::builder(addr).bind()
    }

    /// Settings for a listener on `addr`.
    pub fn builder(addr: SocketAddr) -> CmListenerBuilder {
        CmListenerBuilder {
            addr,
            backlog: 64,
            resources: ResourceOptions::default(),
            params: CmParams::default(),
        }
    }

    /// The bound address, with the port the system chose for port 0.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Waits up to `timeout` for the next connection request.
    pub fn accept(&self, timeout: Duration) -> CmResult<CmIncoming> {
        let deadline = ferrovia_types::deadline_after(timeout);
        loop {
            let raw = self.id.channel().next(
                deadline,
                "waiting for a connection request (RDMA_CM_EVENT_CONNECT_REQUEST)",
                self.local,
            )?;
            let kind = raw.event.event_type();
            if kind == CmEventType::DEVICE_REMOVAL {
                return Err(CmError::DeviceRemoved { addr: self.local });
            }
            if kind != CmEventType::CONNECT_REQUEST {
                tracing::debug!("RDMA CM listener {}: skipping {kind}", self.local);
                continue;
            }
            // SAFETY: `raw.id` is the new id of the connect request just
            // read and acknowledged from this listener's live channel;
            // nothing else owns it.
            let id = unsafe { CmId::adopt(raw.id, self.local) }?;
            let peer = id.peer_addr().unwrap_or(self.local);
            if raw.event.status() != 0 {
                tracing::debug!(
                    "RDMA CM listener {}: dropping a failed request from {peer} (status {})",
                    self.local,
                    raw.event.status()
                );
                continue;
            }
            let mut event = raw.event;
            return Ok(CmIncoming {
                local: id.local_addr().unwrap_or(self.local),
                id,
                peer,
                offer: event.offer,
                private_data: event.take_private_data(),
                shared: self.shared.clone(),
            });
        }
    }
}

impl AsRawFd for CmListener {
    /// The listener's event channel fd (non-blocking): readable when a
    /// request is pending.
    fn as_raw_fd(&self) -> RawFd {
        self.id.channel().as_raw_fd()
    }
}

/// A connection request: accept it with a queue pair, or reject it.
/// Dropping it unanswered rejects it.
#[derive(Debug)]
pub struct CmIncoming {
    id: CmId,
    peer: SocketAddr,
    local: SocketAddr,
    offer: ConnOffer,
    private_data: Vec<u8>,
    shared: Arc<Shared>,
}

impl CmIncoming {
    /// The client's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The local address the request arrived on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The client's private data: the request's whole private area on IB
    /// and RoCE (56 bytes, zero-padded past what the client wrote).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The RDMA device the request arrived on.
    pub fn device_name(&self) -> String {
        self.id.device_name().unwrap_or_default()
    }

    /// The device port the request arrived on.
    pub fn port_num(&self) -> u8 {
        self.id.port_num()
    }

    /// Makes a CQ and an RC QP on the request's device and port, in the
    /// listener's PD for that device, and moves the QP to RTS so receives
    /// can be posted before accepting.
    pub fn create_resources(&self) -> CmResult<CmResources> {
        self.create_resources_inner()
            .map_err(|e| explain(&self.id, self.peer, e, true))
    }

    fn create_resources_inner(&self) -> CmResult<CmResources> {
        let device = self.device_name();
        let pd = self.shared.pd_for(&device);
        let res = self
            .shared
            .resources
            .create(pd.as_ref(), &device, self.port_num(), self.peer)?;
        self.shared.remember(&res.pd);
        self.ready_qp(&res.qp)?;
        Ok(res)
    }

    /// Moves `qp` (on the request's device and port, in RESET) through
    /// INIT and RTR to RTS with the connection manager's attributes, so
    /// receives can be posted before the client can send.
    /// [`CmIncoming::accept_qp`] does it if needed.
    pub fn ready_qp(&self, qp: &QueuePair) -> CmResult<()> {
        check_device(&self.id, qp, self.peer)?;
        let depths = self.depths(qp)?;
        qp_state::to_init(&self.id, qp, self.peer)?;
        qp_state::to_rts(
            &self.id,
            qp,
            self.peer,
            Some(depths),
            self.shared.params.min_rnr_timer,
        )
    }

    fn depths(&self, qp: &QueuePair) -> CmResult<Depths> {
        let dev = qp
            .pd()
            .context()
            .query_device()
            .map_err(|source| CmError::Verbs {
                addr: self.peer,
                source,
            })?;
        Ok(self.shared.params.accept_depths(
            &dev,
            self.offer.responder_resources,
            self.offer.initiator_depth,
        ))
    }

    /// Accepts with new verbs objects ([`CmIncoming::create_resources`]),
    /// answering with `private_data` (at most 196 bytes on IB and RoCE),
    /// and waits up to `timeout` for the client to confirm.
    pub fn accept(self, private_data: &[u8], timeout: Duration) -> CmResult<CmConnection> {
        check_private_data("rdma_accept", self.peer, private_data)?;
        let resources = self.create_resources()?;
        self.accept_with(resources, private_data, timeout)
    }

    /// Accepts with objects from [`CmIncoming::create_resources`] (or
    /// gathered by hand on the request's device and port).
    pub fn accept_with(
        self,
        resources: CmResources,
        private_data: &[u8],
        timeout: Duration,
    ) -> CmResult<CmConnection> {
        let link = self.accept_qp(&resources.qp, private_data, timeout)?;
        Ok(CmConnection::new(resources, link))
    }

    /// Accepts with `qp` (on the request's device and port; in RESET, or
    /// in RTS after [`CmIncoming::ready_qp`]), answering with
    /// `private_data` (at most 196 bytes on IB and RoCE), and waits up to
    /// `timeout` for the client to confirm (`RDMA_CM_EVENT_ESTABLISHED`).
    /// On failure the QP is moved to the error state.
    ///
    /// Over-long private data fails before anything is sent; the request
    /// is then dropped, which rejects it.
    pub fn accept_qp(
        mut self,
        qp: &QueuePair,
        private_data: &[u8],
        timeout: Duration,
    ) -> CmResult<CmLink> {
        let deadline = ferrovia_types::deadline_after(timeout);
        check_private_data("rdma_accept", self.peer, private_data)?;
        check_device(&self.id, qp, self.peer)?;
        let result = match self.answer(qp, private_data, deadline) {
            Ok(()) => Ok(CmLink::new(self.id, self.peer, self.private_data)),
            Err(e) => Err(explain(&self.id, self.peer, e, true)),
        };
        fail_qp(qp, result)
    }

    fn answer(&mut self, qp: &QueuePair, private_data: &[u8], deadline: Instant) -> CmResult<()> {
        let peer = self.peer;
        match qp_state::state(qp, peer)? {
            QpState::Reset => self.ready_qp(qp)?,
            QpState::ReadyToSend => {}
            other => {
                return Err(CmError::InvalidArgument {
                    addr: peer,
                    reason: format!(
                        "QP {} is in state {other:?}; accepting needs RESET or RTS",
                        qp.qp_num()
                    ),
                });
            }
        }
        let depths = self.depths(qp)?;
        let mut param = self
            .shared
            .params
            .conn_param(depths, qp.qp_num(), private_data);
        // `private_data` outlives the call.
        self.id.accept(peer, &mut param)?;
        expect(
            &self.id,
            CmEventType::ESTABLISHED,
            deadline,
            "waiting for the client to confirm (RDMA_CM_EVENT_ESTABLISHED)",
            peer,
        )?;
        tracing::debug!(
            "RDMA CM: accepted {peer} on QP {} (client QP {})",
            qp.qp_num(),
            self.offer.qp_num
        );
        Ok(())
    }

    /// Rejects the request with `private_data` (at most 148 bytes on IB
    /// and RoCE): the client's connect fails with
    /// [`CmError::Rejected`] carrying it.
    pub fn reject(mut self, private_data: &[u8]) -> CmResult<()> {
        check_private_data("rdma_reject", self.peer, private_data)?;
        self.id.reject(self.peer, private_data)
    }
}
