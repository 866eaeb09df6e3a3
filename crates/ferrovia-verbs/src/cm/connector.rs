//! The connecting side: resolve an address to a device, port and route,
//! then connect a queue pair to whoever listens there.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::cm::error::{CmError, CmResult};
use crate::cm::event::CmEventType;
use crate::cm::id::CmId;
use crate::cm::link::{CmConnection, CmLink, fail_qp};
use crate::cm::outcome::{expect, explain, millis_left};
use crate::cm::params::{CmParams, check_private_data};
use crate::cm::qp_state::{self, check_device};
use crate::cm::resources::{CmResources, ResourceOptions};
use crate::pd::ProtectionDomain;
use crate::qp::{QpCaps, QpState, QueuePair};

/// Connects to `addr` with `private_data` (at most
/// [`CONNECT_PRIVATE_DATA_MAX`](crate::cm::CONNECT_PRIVATE_DATA_MAX)
/// bytes) within `timeout`: resolves the address to a device and route,
/// makes a PD, a CQ and an RC QP there, and connects. The shorthand of
/// [`CmConnector::connect`] with the default settings.
pub fn cm_connect(
    addr: SocketAddr,
    private_data: &[u8],
    timeout: Duration,
) -> CmResult<CmConnection> {
    CmConnector::new(addr).connect(private_data, timeout)
}

/// Settings of an outgoing connection.
#[derive(Debug, Clone)]
pub struct CmConnector {
    addr: SocketAddr,
    source: Option<SocketAddr>,
    resources: ResourceOptions,
    params: CmParams,
}

impl CmConnector {
    /// A connection to `addr` (IPv4, or IPv6; a link-local IPv6 address
    /// needs its scope id, the interface index).
    pub fn new(addr: SocketAddr) -> CmConnector {
        CmConnector {
            addr,
            source: None,
            resources: ResourceOptions::default(),
            params: CmParams::default(),
        }
    }

    /// A connection to `host:port`, the name resolved by the system's
    /// resolver (the first address it gives).
    pub fn to_host(host: &str) -> CmResult<CmConnector> {
        let bad = |reason: String| CmError::BadAddress {
            host: host.to_owned(),
            reason,
        };
        let addr = host
            .to_socket_addrs()
            .map_err(|e| bad(e.to_string()))?
            .next()
            .ok_or_else(|| bad("no address".to_owned()))?;
        Ok(CmConnector::new(addr))
    }

    /// Connects from this local address (picks the device, as `rping -I`).
    pub fn source(mut self, addr: SocketAddr) -> Self {
        self.source = Some(addr);
        self
    }

    /// Makes the connection's QP in this PD (it must be on the device the
    /// address resolves to); default: a new PD.
    pub fn pd(mut self, pd: &ProtectionDomain) -> Self {
        self.resources.pd = Some(pd.clone());
        self
    }

    /// Queue sizes of the connection's QP.
    pub fn caps(mut self, caps: QpCaps) -> Self {
        self.resources.caps = caps;
        self
    }

    /// Read depths, retries and the RNR timer.
    pub fn params(mut self, params: CmParams) -> Self {
        self.params = params;
        self
    }

    /// Resolves the address and the route to it, within `timeout`.
    pub fn resolve(self, timeout: Duration) -> CmResult<CmResolved> {
        self.resolve_until(ferrovia_types::deadline_after(timeout))
    }

    fn resolve_until(self, deadline: Instant) -> CmResult<CmResolved> {
        let addr = self.addr;
        self.params.validate(addr)?;
        let mut id = CmId::new(addr)?;
        id.resolve_addr(self.source, addr, millis_left(deadline))?;
        expect(
            &id,
            CmEventType::ADDR_RESOLVED,
            deadline,
            "resolving the address (RDMA_CM_EVENT_ADDR_RESOLVED)",
            addr,
        )?;
        id.resolve_route(addr, millis_left(deadline))?;
        expect(
            &id,
            CmEventType::ROUTE_RESOLVED,
            deadline,
            "resolving the route (RDMA_CM_EVENT_ROUTE_RESOLVED)",
            addr,
        )?;
        tracing::debug!(
            "RDMA CM: {addr} resolved to {} port {}",
            id.device_name().unwrap_or_default(),
            id.port_num()
        );
        Ok(CmResolved {
            id,
            addr,
            resources: self.resources,
            params: self.params,
        })
    }

    /// Resolves, makes the verbs objects, and connects, all within
    /// `timeout`.
    pub fn connect(self, private_data: &[u8], timeout: Duration) -> CmResult<CmConnection> {
        check_private_data("rdma_connect", self.addr, private_data)?;
        let deadline = ferrovia_types::deadline_after(timeout);
        let resolved = self.resolve_until(deadline)?;
        let resources = resolved.create_resources()?;
        resolved.connect_until(resources, private_data, deadline)
    }
}

/// An address resolved to a device, port and route, ready to connect.
#[derive(Debug)]
pub struct CmResolved {
    id: CmId,
    addr: SocketAddr,
    resources: ResourceOptions,
    params: CmParams,
}

impl CmResolved {
    /// The address being connected to.
    pub fn peer_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The local address the connection will use.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.id.local_addr()
    }

    /// The RDMA device the address is reached through.
    pub fn device_name(&self) -> String {
        self.id.device_name().unwrap_or_default()
    }

    /// The device port the address is reached through.
    pub fn port_num(&self) -> u8 {
        self.id.port_num()
    }

    /// Makes a PD (unless the connector was given one), a CQ and an RC QP
    /// on the resolved device and port, the QP moved to INIT so receives
    /// can be posted before connecting.
    pub fn create_resources(&self) -> CmResult<CmResources> {
        let res = self
            .resources
            .create(None, &self.device_name(), self.port_num(), self.addr)?;
        self.ready_qp(&res.qp)?;
        Ok(res)
    }

    /// Moves `qp` (on the resolved device and port, in RESET) to INIT with
    /// the connection manager's attributes, so receives can be posted
    /// before connecting. [`CmResolved::connect_qp`] does it if needed.
    pub fn ready_qp(&self, qp: &QueuePair) -> CmResult<()> {
        check_device(&self.id, qp, self.addr)?;
        qp_state::to_init(&self.id, qp, self.addr)
    }

    /// Connects with a QP made by [`CmResolved::create_resources`] (or
    /// gathered by hand on the resolved device), within `timeout`.
    pub fn connect(
        self,
        resources: CmResources,
        private_data: &[u8],
        timeout: Duration,
    ) -> CmResult<CmConnection> {
        self.connect_until(
            resources,
            private_data,
            ferrovia_types::deadline_after(timeout),
        )
    }

    fn connect_until(
        self,
        resources: CmResources,
        private_data: &[u8],
        deadline: Instant,
    ) -> CmResult<CmConnection> {
        let link = self.connect_qp_until(&resources.qp, private_data, deadline)?;
        Ok(CmConnection::new(resources, link))
    }

    /// Connects `qp` (on the resolved device and port; in RESET, or in
    /// INIT after [`CmResolved::ready_qp`]) with `private_data` (at most
    /// 56 bytes on IB and RoCE), within `timeout`: sends the request,
    /// waits for the answer, moves the QP to RTR and RTS and completes the
    /// handshake. On failure the QP is moved to the error state.
    pub fn connect_qp(
        self,
        qp: &QueuePair,
        private_data: &[u8],
        timeout: Duration,
    ) -> CmResult<CmLink> {
        self.connect_qp_until(qp, private_data, ferrovia_types::deadline_after(timeout))
    }

    fn connect_qp_until(
        mut self,
        qp: &QueuePair,
        private_data: &[u8],
        deadline: Instant,
    ) -> CmResult<CmLink> {
        let addr = self.addr;
        check_private_data("rdma_connect", addr, private_data)?;
        check_device(&self.id, qp, addr)?;
        let result = match self.handshake(qp, private_data, deadline) {
            Ok(data) => Ok(CmLink::new(self.id, addr, data)),
            Err(e) => Err(explain(&self.id, addr, e, false)),
        };
        fail_qp(qp, result)
    }

    fn handshake(
        &mut self,
        qp: &QueuePair,
        private_data: &[u8],
        deadline: Instant,
    ) -> CmResult<Vec<u8>> {
        let addr = self.addr;
        match qp_state::state(qp, addr)? {
            QpState::Reset => qp_state::to_init(&self.id, qp, addr)?,
            QpState::Init => {}
            other => {
                return Err(CmError::InvalidArgument {
                    addr,
                    reason: format!(
                        "QP {} is in state {other:?}; connecting needs RESET or INIT",
                        qp.qp_num()
                    ),
                });
            }
        }
        let dev = qp
            .pd()
            .context()
            .query_device()
            .map_err(|source| CmError::Verbs { addr, source })?;
        let depths = self.params.connect_depths(&dev);
        let mut param = self.params.conn_param(depths, qp.qp_num(), private_data);
        // `private_data` outlives the call.
        self.id.connect(addr, &mut param)?;
        let mut answer = expect(
            &self.id,
            CmEventType::CONNECT_RESPONSE,
            deadline,
            "waiting for the peer's answer (RDMA_CM_EVENT_CONNECT_RESPONSE)",
            addr,
        )?;
        qp_state::to_rts(&self.id, qp, addr, None, self.params.min_rnr_timer)?;
        self.id.establish(addr)?;
        tracing::debug!(
            "RDMA CM: QP {} connected to {addr} (peer QP {})",
            qp.qp_num(),
            answer.offer.qp_num
        );
        Ok(answer.take_private_data())
    }
}
