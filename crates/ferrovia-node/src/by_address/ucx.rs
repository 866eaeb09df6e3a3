//! Connection by address on UCX: a [`UcxListener`] and transports of one
//! peer each (`ucp_ep_create` with the socket address or the client's
//! request). UCX's handshake carries no application data, so the private
//! data travels in handshake messages on the transport's control channel,
//! framed and bounded as on verbs: the client's request, the server's
//! accept or reject, and the client's "ready" (the connection manager's
//! "ready to use" on verbs), after which the channel is handed out.
//!
//! Bounds, whatever connects: no thread of the listener's own (the
//! accepting thread takes requests in); at most `max_pending` requests in
//! their handshake at once (each a UCX worker and its progress thread),
//! more are rejected at once; each has `handshake_timeout` to send its
//! request, else it is dropped; a handshake message is at most 256 bytes
//! and at most four are kept; refusals are logged one by one for the first
//! eight, then counted.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ferrovia_channel::{Channel, ChannelBuilder, ChannelConfig, Transport};
use ferrovia_mr::MrRegistry;
use ferrovia_ucx::{
    EndpointFailure, UcxContext, UcxError, UcxListener, UcxTransport, UcxTransportBuilder,
};

use crate::Backend;
use crate::by_address::error::{ConnectError, no_route};
use crate::by_address::handshake::{self, Decoded, Kind};

/// How long the accepting thread sleeps on the listener between looks at
/// the handshakes in progress.
const LOOK_EVERY: Duration = Duration::from_millis(2);
/// Refusals logged one by one; the rest are counted.
const LOGGED_REFUSALS: u64 = 8;

/// What bounds a listener.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_pending: usize,
    pub(crate) handshake_timeout: Duration,
}

/// A UCX listener and the requests in their handshake.
pub(crate) struct UcxSide {
    ctx: UcxContext,
    listener: UcxListener,
    builder: UcxTransportBuilder,
    cfg: ChannelConfig,
    limits: Limits,
    pending: Mutex<Vec<Handshake>>,
    refused: AtomicU64,
}

/// A client whose request has not arrived yet.
struct Handshake {
    t: UcxTransport,
    peer: SocketAddr,
    until: Instant,
}

/// A client's request, its transport connected, not yet answered.
pub(crate) struct UcxIncoming {
    /// `None` once answered.
    t: Option<UcxTransport>,
    peer: SocketAddr,
    cfg: ChannelConfig,
    /// The channel's registry, there before the answer.
    pub(crate) registry: MrRegistry,
}

/// A client's transport, its endpoint made, its request not yet sent.
pub(crate) struct UcxOutgoing {
    t: UcxTransport,
    addr: SocketAddr,
    cfg: ChannelConfig,
    /// The channel's registry, there before the request.
    pub(crate) registry: MrRegistry,
}

impl Drop for UcxIncoming {
    /// An unanswered request is rejected, with no private data.
    fn drop(&mut self) {
        if let Some(t) = self.t.take()
            && let Ok(bytes) = handshake::encode(Kind::Reject, &[], self.peer)
        {
            let _ = t.send_handshake(&bytes);
        }
    }
}

/// The transport settings of `channel`, unless `given`.
pub(crate) fn transport_builder(
    channel: &ChannelBuilder,
    given: Option<&UcxTransportBuilder>,
) -> UcxTransportBuilder {
    if let Some(b) = given {
        return b.clone();
    }
    let b = UcxTransport::builder().shared_receives(channel.config().shared_receives);
    #[cfg(feature = "verbs")]
    let b = {
        let caps = channel.config().caps;
        b.depths(caps.max_send_wr, caps.max_recv_wr)
    };
    b
}

fn context(addr: SocketAddr) -> Result<UcxContext, ConnectError> {
    UcxContext::for_address(addr, ferrovia_ucx::Exposure::for_address(addr.ip()), &[])
        .map_err(|e| ConnectError::backend(addr, e))
}

/// The channel over a transport whose handshake is done.
fn channel(
    t: UcxTransport,
    registry: MrRegistry,
    cfg: ChannelConfig,
    peer: SocketAddr,
    peer_data: Vec<u8>,
) -> Result<Channel, ConnectError> {
    Channel::over(Arc::new(t), registry, cfg)
        .map(|c| c.with_peer(peer, peer_data))
        .map_err(|e| ConnectError::backend(peer, e))
}

/// Drops a transport whose handshake failed: its endpoint is closed at
/// once (nothing of it is worth a graceful close).
fn abandon(t: UcxTransport) {
    let _ = Transport::flush(&t, 0);
    drop(t);
}

/// What a wait for the peer's next handshake message found.
enum Heard {
    Message(Vec<u8>),
    Failed(EndpointFailure),
    TimedOut,
}

/// Waits until `deadline` for `t`'s next handshake message (the progress
/// thread receives it) or its endpoint's failure.
fn hear(t: &UcxTransport, deadline: Instant) -> Heard {
    let mut nap = Duration::from_micros(50);
    loop {
        if let Some(m) = t.take_handshake() {
            return Heard::Message(m);
        }
        if let Some(f) = t.peer_failure() {
            return Heard::Failed(f);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Heard::TimedOut;
        }
        std::thread::sleep(nap.min(left));
        nap = (nap * 2).min(Duration::from_millis(1));
    }
}

/// An endpoint failure while connecting to `addr`, as a [`ConnectError`].
fn failure(f: EndpointFailure, addr: SocketAddr) -> ConnectError {
    match f {
        EndpointFailure::NotConnected => match no_route(addr) {
            Some(why) => ConnectError::Unreachable {
                addr,
                reason: format!("no route: {why}"),
            },
            None => ConnectError::NotListening {
                addr,
                backend: Backend::Ucx,
            },
        },
        EndpointFailure::Rejected => ConnectError::Refused {
            addr,
            reason: "the listener turned the request away (too many requests in their handshake, or it closed)".into(),
        },
        EndpointFailure::Unreachable => ConnectError::Unreachable {
            addr,
            reason: format!(
                "no route or host answers there, or no UCX transport reaches it ({f}; a connection by address needs tcp in UCX_TLS)"
            ),
        },
        other => ConnectError::Disconnected {
            addr,
            reason: other.to_string(),
        },
    }
}

fn ucx_error(e: UcxError, addr: SocketAddr) -> ConnectError {
    match e {
        UcxError::AddrInUse { addr } => ConnectError::AddrInUse { addr },
        other => ConnectError::backend(addr, other),
    }
}

impl UcxSide {
    pub(crate) fn bind(
        addr: SocketAddr,
        channel: &ChannelBuilder,
        builder: Option<&UcxTransportBuilder>,
        limits: Limits,
    ) -> Result<UcxSide, ConnectError> {
        let ctx = context(addr)?;
        let listener = UcxListener::bind(&ctx, addr).map_err(|e| ucx_error(e, addr))?;
        Ok(UcxSide {
            ctx,
            listener,
            builder: transport_builder(channel, builder),
            cfg: channel.config().clone(),
            limits,
            pending: Mutex::new(Vec::new()),
            refused: AtomicU64::new(0),
        })
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }

    fn refuse(&self, peer: SocketAddr, why: &str) {
        let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        if n <= LOGGED_REFUSALS {
            log::warn!("listener {}: dropped {peer}: {why}", self.local_addr());
        } else {
            log::debug!(
                "listener {}: dropped {peer}: {why} ({n} so far)",
                self.local_addr()
            );
        }
    }

    /// Requests turned away or dropped so far.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Takes in the requests that arrived: each gets a transport, within
    /// the bound on handshakes in progress.
    fn take_in(&self, pending: &mut Vec<Handshake>) -> Result<(), ConnectError> {
        let local = self.local_addr();
        while let Some(request) = self
            .listener
            .next_request(Duration::ZERO)
            .map_err(|e| ConnectError::backend(local, e))?
        {
            self.admit(pending, request);
        }
        Ok(())
    }

    /// Starts `request`'s handshake, within the bound on handshakes in
    /// progress.
    fn admit(&self, pending: &mut Vec<Handshake>, request: ferrovia_ucx::UcxConnRequest) {
        let peer = request.client_addr();
        if pending.len() >= self.limits.max_pending {
            request.reject();
            self.refuse(peer, "too many requests in their handshake");
            return;
        }
        match self.builder.clone().accept(&self.ctx, request) {
            Ok(t) => pending.push(Handshake {
                t,
                peer,
                until: Instant::now() + self.limits.handshake_timeout,
            }),
            Err(e) => self.refuse(peer, &e.to_string()),
        }
    }

    /// The first handshake whose request arrived, in order of arrival;
    /// drops those that failed, sent something else, or ran out of time.
    fn ready(&self, pending: &mut Vec<Handshake>) -> Option<(SocketAddr, Vec<u8>, UcxIncoming)> {
        let now = Instant::now();
        let mut i = 0;
        while i < pending.len() {
            let h = &pending[i];
            if let Some(m) = h.t.take_handshake() {
                let h = pending.remove(i);
                match handshake::expect(Kind::Request, &m, h.peer) {
                    Ok(data) => {
                        let data = data.to_vec();
                        let incoming = UcxIncoming {
                            registry: MrRegistry::with_registrar(h.t.registrar()),
                            t: Some(h.t),
                            peer: h.peer,
                            cfg: self.cfg.clone(),
                        };
                        return Some((h.peer, data, incoming));
                    }
                    Err(e) => {
                        self.refuse(h.peer, &e.to_string());
                        abandon(h.t);
                    }
                }
            } else if let Some(f) = h.t.peer_failure() {
                let h = pending.remove(i);
                self.refuse(h.peer, &format!("went away before its request: {f}"));
                abandon(h.t);
            } else if now >= h.until {
                let h = pending.remove(i);
                self.refuse(
                    h.peer,
                    &format!("sent no request within {:?}", self.limits.handshake_timeout),
                );
                abandon(h.t);
            } else {
                i += 1;
            }
        }
        None
    }

    pub(crate) fn accept(
        &self,
        timeout: Duration,
    ) -> Result<(SocketAddr, Vec<u8>, UcxIncoming), ConnectError> {
        let start = Instant::now();
        let deadline = start + timeout;
        loop {
            {
                let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                self.take_in(&mut pending)?;
                if let Some(ready) = self.ready(&mut pending) {
                    return Ok(ready);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ConnectError::Timeout {
                    what: "waiting for a connection request",
                    addr: self.local_addr(),
                    after: start.elapsed(),
                });
            }
            // Sleeps on the listener's worker; a request arriving is taken
            // in by the next round (it stays in the listener's queue).
            if let Some(request) = self
                .listener
                .next_request(left.min(LOOK_EVERY))
                .map_err(|e| ConnectError::backend(self.local_addr(), e))?
            {
                let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                self.admit(&mut pending, request);
            }
        }
    }
}

impl UcxIncoming {
    pub(crate) fn accept(
        mut self,
        client_data: Vec<u8>,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Channel, ConnectError> {
        let peer = self.peer;
        // Too much data: refused before anything is sent; dropping `self`
        // then rejects the request.
        let bytes = handshake::encode(Kind::Accept, private_data, peer)?;
        let Some(t) = self.t.take() else {
            return Err(ConnectError::Protocol {
                addr: peer,
                reason: "the request was already answered".into(),
            });
        };
        let start = Instant::now();
        if let Err(e) = t.send_handshake(&bytes) {
            abandon(t);
            return Err(ConnectError::backend(peer, e));
        }
        let outcome = match hear(&t, start + timeout) {
            Heard::Message(m) => handshake::expect(Kind::Ready, &m, peer).map(drop),
            Heard::Failed(f) => Err(ConnectError::Disconnected {
                addr: peer,
                reason: f.to_string(),
            }),
            Heard::TimedOut => Err(ConnectError::Timeout {
                what: "waiting for the client to confirm",
                addr: peer,
                after: start.elapsed(),
            }),
        };
        match outcome {
            Ok(()) => {
                let registry = std::mem::replace(
                    &mut self.registry,
                    MrRegistry::with_registrar(t.registrar()),
                );
                channel(t, registry, self.cfg.clone(), peer, client_data)
            }
            Err(e) => {
                abandon(t);
                Err(e)
            }
        }
    }

    pub(crate) fn reject(mut self, private_data: &[u8]) -> Result<(), ConnectError> {
        // Too much data: refused before anything is sent; dropping `self`
        // then rejects the request with none.
        let bytes = handshake::encode(Kind::Reject, private_data, self.peer)?;
        let Some(t) = self.t.take() else {
            return Ok(());
        };
        let sent = t.send_handshake(&bytes);
        // Dropping closes gracefully: the endpoint's flush delivers the
        // reject before the close.
        drop(t);
        sent.map_err(|e| ConnectError::backend(self.peer, e))
    }
}

/// Makes a transport with an endpoint to `addr` (nothing is sent yet).
pub(crate) fn resolve(
    addr: SocketAddr,
    settings: &ChannelBuilder,
    builder: Option<&UcxTransportBuilder>,
) -> Result<UcxOutgoing, ConnectError> {
    let ctx = context(addr)?;
    let t = transport_builder(settings, builder)
        .connect_to(&ctx, addr)
        .map_err(|e| ucx_error(e, addr))?;
    Ok(UcxOutgoing {
        registry: MrRegistry::with_registrar(t.registrar()),
        t,
        addr,
        cfg: settings.config().clone(),
    })
}

impl UcxOutgoing {
    /// Sends the request with `private_data`, waits up to `timeout` for
    /// the answer, and confirms an accept.
    pub(crate) fn connect(
        self,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Channel, ConnectError> {
        let UcxOutgoing {
            t,
            addr,
            cfg,
            registry,
        } = self;
        let bytes = match handshake::encode(Kind::Request, private_data, addr) {
            Ok(b) => b,
            Err(e) => {
                abandon(t);
                return Err(e);
            }
        };
        let start = Instant::now();
        if let Err(e) = t.send_handshake(&bytes) {
            abandon(t);
            return Err(ConnectError::backend(addr, e));
        }
        let answer = match hear(&t, start + timeout) {
            Heard::Message(m) => match handshake::decode(&m) {
                Decoded::Ours(Kind::Accept, data) => Ok(data.to_vec()),
                Decoded::Ours(Kind::Reject, data) => Err(ConnectError::Rejected {
                    addr,
                    private_data: data.to_vec(),
                }),
                _ => Err(handshake::expect(Kind::Accept, &m, addr)
                    .map(drop)
                    .err()
                    .unwrap_or(ConnectError::Protocol {
                        addr,
                        reason: "an unexpected answer".into(),
                    })),
            },
            Heard::Failed(f) => Err(failure(f, addr)),
            Heard::TimedOut => Err(ConnectError::Timeout {
                what: "waiting for the server's answer",
                addr,
                after: start.elapsed(),
            }),
        };
        let ready = answer.and_then(|a| Ok((a, handshake::encode(Kind::Ready, &[], addr)?)));
        let (answer, ready) = match ready {
            Ok(r) => r,
            Err(e) => {
                abandon(t);
                return Err(e);
            }
        };
        if let Err(e) = t.send_handshake(&ready) {
            abandon(t);
            return Err(ConnectError::backend(addr, e));
        }
        channel(t, registry, cfg, addr, answer)
    }
}
