//! Connection by address on verbs: the RDMA connection manager
//! (`ferrovia_verbs::cm`). Each connection's queue pair is made by a
//! [`VerbsTransport`] of one peer (its own CQ, in a protection domain per
//! device that the listener's connections share), moved through INIT/RTR/RTS
//! with the connection manager's attributes, and its [`CmLink`] watched by
//! the transport, so the peer's disconnect flushes the pending work.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use std::sync::Arc;

use ferrovia_channel::{Channel, ChannelBuilder, ChannelConfig, MultiChannel};
use ferrovia_mr::MrRegistry;
use ferrovia_verbs::cm::{
    CmConnector, CmError, CmIncoming, CmLink, CmListener, CmParams, CmResolved, RejectReason,
};
use ferrovia_verbs::{Context, ProtectionDomain};
use ferrovia_verbs_transport::{VerbsConfig, VerbsTransport, registry};

use crate::Backend;
use crate::backend::VerbsSettings;
use crate::by_address::error::ConnectError;
use crate::by_address::handshake::{self, Decoded, Kind};

/// A listener on the connection manager.
pub(crate) struct VerbsListener {
    cm: CmListener,
    cfg: ChannelConfig,
    verbs: VerbsConfig,
    /// One protection domain per device, shared by the connections.
    pds: Mutex<Vec<ProtectionDomain>>,
    /// Requests refused as badly framed.
    refused: AtomicU64,
}

/// A request taken from the connection manager, not yet answered.
pub(crate) struct VerbsIncoming {
    request: CmIncoming,
    cfg: ChannelConfig,
    verbs: VerbsConfig,
    pd: ProtectionDomain,
    /// The channel's registry, there before the answer.
    registry: MrRegistry,
}

/// An address resolved to a device and route, its queue pair made.
pub(crate) struct VerbsOutgoing {
    resolved: CmResolved,
    transport: VerbsTransport,
    cfg: ChannelConfig,
    /// The channel's registry, there before the request.
    registry: MrRegistry,
}

fn params(verbs: &VerbsConfig) -> CmParams {
    let c = &verbs.connect;
    CmParams::default()
        .responder_resources(c.max_rd_atomic)
        .initiator_depth(c.max_rd_atomic)
        .retry_count(c.retry_cnt)
        .rnr_retry_count(c.rnr_retry)
        .min_rnr_timer(c.min_rnr_timer)
}

/// The protection domain on `device`: `given`'s if it is there, else one
/// from `cache` or opened (and remembered).
fn pd_on(
    device: &str,
    given: Option<&ProtectionDomain>,
    cache: &Mutex<Vec<ProtectionDomain>>,
    addr: SocketAddr,
) -> Result<ProtectionDomain, ConnectError> {
    if let Some(pd) = given.filter(|pd| pd.context().name() == device) {
        return Ok(pd.clone());
    }
    let mut pds = cache.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(pd) = pds.iter().find(|pd| pd.context().name() == device) {
        return Ok(pd.clone());
    }
    let pd = Context::open(device)
        .and_then(|ctx| ProtectionDomain::new(&ctx))
        .map_err(|e| ConnectError::backend(addr, e))?;
    pds.push(pd.clone());
    Ok(pd)
}

/// A transport of one queue pair on `pd`'s device and `port`.
fn transport(
    pd: &ProtectionDomain,
    cfg: &ChannelConfig,
    verbs: &VerbsConfig,
    port: u8,
    addr: SocketAddr,
) -> Result<VerbsTransport, ConnectError> {
    let mut verbs = verbs.clone();
    verbs.port = Some(port);
    verbs.device = Some(pd.context().name().to_owned());
    VerbsTransport::new(pd, 1, cfg, &verbs).map_err(|e| ConnectError::backend(addr, e))
}

/// The channel over a connected transport and its link.
fn channel(
    mut t: VerbsTransport,
    registry: MrRegistry,
    cfg: ChannelConfig,
    link: CmLink,
    peer_data: Vec<u8>,
) -> Result<Channel, ConnectError> {
    let addr = link.peer_addr();
    t.watch(0, link)
        .map_err(|e| ConnectError::backend(addr, e))?;
    Channel::from_multi(MultiChannel::over(Arc::new(t), registry, cfg))
        .map(|c| c.with_peer(addr, peer_data))
        .map_err(|e| ConnectError::backend(addr, e))
}

impl VerbsListener {
    pub(crate) fn bind(
        addr: SocketAddr,
        channel: &ChannelBuilder,
        settings: &VerbsSettings,
        max_pending: usize,
    ) -> Result<VerbsListener, ConnectError> {
        let cfg = channel.config().clone();
        let verbs = settings.config().clone();
        // The connection manager's backlog; the request arrives whole, so
        // the handshake timeout has nothing to bound.
        let cm = CmListener::builder(addr)
            .backlog(u16::try_from(max_pending).unwrap_or(u16::MAX))
            .params(params(&verbs))
            .bind()
            .map_err(|e| map_cm(e, addr))?;
        Ok(VerbsListener {
            cm,
            cfg,
            verbs,
            pds: Mutex::new(settings.protection_domain().cloned().into_iter().collect()),
            refused: AtomicU64::new(0),
        })
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.cm.local_addr()
    }

    /// Requests refused as badly framed.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The next request within `timeout`: its client, its private data
    /// (exactly, from a ferrovia client; the whole area from another),
    /// and the request to answer.
    pub(crate) fn accept(
        &self,
        timeout: Duration,
    ) -> Result<(SocketAddr, Vec<u8>, VerbsIncoming), ConnectError> {
        let deadline = ferrovia_types::deadline_after(timeout);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let request = self
                .cm
                .accept(left)
                .map_err(|e| map_cm(e, self.local_addr()))?;
            let peer = request.peer_addr();
            let data = match handshake::decode(request.private_data()) {
                Decoded::Ours(Kind::Request, data) => data.to_vec(),
                Decoded::Foreign(raw) => raw.to_vec(),
                Decoded::Ours(kind, _) => {
                    tracing::warn!("refusing {peer}: its request is framed as {kind:?}");
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    let _ = request.reject(&[]);
                    continue;
                }
                Decoded::Bad(why) => {
                    tracing::warn!("refusing {peer}: {why}");
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    let _ = request.reject(&[]);
                    continue;
                }
            };
            let device = request.device_name();
            let pd = pd_on(&device, None, &self.pds, peer)?;
            let incoming = VerbsIncoming {
                request,
                cfg: self.cfg.clone(),
                verbs: self.verbs.clone(),
                registry: registry(&pd),
                pd,
            };
            return Ok((peer, data, incoming));
        }
    }
}

impl VerbsIncoming {
    pub(crate) fn registry(&self) -> &MrRegistry {
        &self.registry
    }

    pub(crate) fn accept(
        self,
        client_data: Vec<u8>,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Channel, ConnectError> {
        let peer = self.request.peer_addr();
        let bytes = handshake::encode(Kind::Accept, private_data, peer)?;
        let port = self.request.port_num();
        let t = transport(&self.pd, &self.cfg, &self.verbs, port, peer)?;
        let qp = t.qp(0).map_err(|e| ConnectError::backend(peer, e))?;
        // Receives may be posted from RTS on; the client cannot send
        // before it has our answer, and RNR retries cover the rest.
        self.request.ready_qp(&qp).map_err(|e| map_cm(e, peer))?;
        let link = self
            .request
            .accept_qp(&qp, &bytes, timeout)
            .map_err(|e| map_cm(e, peer))?;
        drop(qp);
        channel(t, self.registry, self.cfg, link, client_data)
    }

    pub(crate) fn reject(self, private_data: &[u8]) -> Result<(), ConnectError> {
        let peer = self.request.peer_addr();
        let bytes = handshake::encode(Kind::Reject, private_data, peer)?;
        self.request.reject(&bytes).map_err(|e| map_cm(e, peer))
    }
}

/// Resolves `addr` to a device, port and route within `timeout`, and
/// makes the queue pair there (in `settings`' protection domain if it is
/// on that device).
pub(crate) fn resolve(
    addr: SocketAddr,
    channel: &ChannelBuilder,
    settings: &VerbsSettings,
    timeout: Duration,
) -> Result<VerbsOutgoing, ConnectError> {
    let cfg = channel.config();
    let resolved = CmConnector::new(addr)
        .params(params(settings.config()))
        .resolve(timeout)
        .map_err(|e| map_cm(e, addr))?;
    let cache = Mutex::new(Vec::new());
    let pd = pd_on(
        &resolved.device_name(),
        settings.protection_domain(),
        &cache,
        addr,
    )?;
    let port = resolved.port_num();
    let transport = transport(&pd, cfg, settings.config(), port, addr)?;
    let qp = transport
        .qp(0)
        .map_err(|e| ConnectError::backend(addr, e))?;
    resolved.ready_qp(&qp).map_err(|e| map_cm(e, addr))?;
    drop(qp);
    Ok(VerbsOutgoing {
        resolved,
        registry: registry(&pd),
        transport,
        cfg: cfg.clone(),
    })
}

impl VerbsOutgoing {
    pub(crate) fn registry(&self) -> &MrRegistry {
        &self.registry
    }

    /// Sends the request with `private_data` and waits up to `timeout`
    /// for the answer.
    pub(crate) fn connect(
        self,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Channel, ConnectError> {
        let addr = self.resolved.peer_addr();
        let bytes = handshake::encode(Kind::Request, private_data, addr)?;
        let qp = self
            .transport
            .qp(0)
            .map_err(|e| ConnectError::backend(addr, e))?;
        let link = self
            .resolved
            .connect_qp(&qp, &bytes, timeout)
            .map_err(|e| map_cm(e, addr))?;
        drop(qp);
        let answer = match handshake::decode(link.private_data()) {
            Decoded::Ours(Kind::Accept, data) => data.to_vec(),
            Decoded::Foreign(raw) => raw.to_vec(),
            Decoded::Ours(kind, _) => {
                return Err(ConnectError::Protocol {
                    addr,
                    reason: format!("the server answered with a {kind:?} message"),
                });
            }
            Decoded::Bad(reason) => return Err(ConnectError::Protocol { addr, reason }),
        };
        channel(self.transport, self.registry, self.cfg, link, answer)
    }
}

/// The connection manager's error as a [`ConnectError`] about `addr`.
fn map_cm(e: CmError, addr: SocketAddr) -> ConnectError {
    let addr = e.addr().unwrap_or(addr);
    match e {
        CmError::NotListening { .. } => ConnectError::NotListening {
            addr,
            backend: Backend::Verbs,
        },
        CmError::Rejected {
            reason,
            private_data,
            ..
        } if reason == RejectReason::CONSUMER_DEFINED => ConnectError::Rejected {
            addr,
            private_data: match handshake::decode(&private_data) {
                Decoded::Ours(Kind::Reject, data) => data.to_vec(),
                _ => private_data,
            },
        },
        CmError::Rejected { reason, .. } => ConnectError::Refused {
            addr,
            reason: reason.to_string(),
        },
        CmError::AddressResolution { .. }
        | CmError::RouteResolution { .. }
        | CmError::Unreachable { .. } => ConnectError::Unreachable {
            addr,
            reason: e.to_string(),
        },
        CmError::AddrInUse { .. } => ConnectError::AddrInUse { addr },
        CmError::Timeout { what, after, .. } => ConnectError::Timeout { what, addr, after },
        CmError::Disconnected { .. }
        | CmError::ConnectError { .. }
        | CmError::RequestWithdrawn { .. } => ConnectError::Disconnected {
            addr,
            reason: e.to_string(),
        },
        CmError::PrivateDataTooLong { what, len, max, .. } => ConnectError::PrivateDataTooLong {
            what,
            addr,
            len,
            max,
        },
        other => ConnectError::backend(addr, other),
    }
}

/// The IPv4 address of the default device's first active port (its RoCE
/// v2 IPv4-mapped GID).
pub(crate) fn local_ip() -> Option<std::net::IpAddr> {
    let ctx = Context::open_default().ok()?;
    let port = ctx.active_port().ok()?.port;
    ctx.gid_table(port)
        .ok()?
        .into_iter()
        .find_map(|e| std::net::Ipv6Addr::from(e.gid.0).to_ipv4_mapped())
        .map(std::net::IpAddr::V4)
}
