//! Connection by address on UCX, the listening side: ferrovia's own
//! front door on plain TCP (`front_door`), then transports of one peer
//! whose endpoints come from the worker addresses the two sides traded.
//! No byte of a stranger's reaches UCX: its socket connection manager
//! aborts the process on malformed ones (17 zero bytes did), so it is not
//! used. A client on this host works over shared memory alone; the TCP
//! connection stays open as the connection's link, so a peer that goes
//! away fails the channel's work even where UCX cannot tell (shared
//! memory).
//!
//! Bounds, whatever connects: no thread of the listener's own (the
//! accepting thread reads the front door without blocking); at most
//! `max_pending` connections in their handshake (a new one evicts the
//! oldest, so connections that never speak cannot lock real clients
//! out); each has `handshake_timeout` to send its request, whose length
//! is checked from its 8-byte header before its body is read (at most
//! ~9 KiB); a UCX worker is made only for a request that decoded;
//! refusals are logged one by one for the first eight, then counted.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use ferrovia_channel::{Channel, ChannelBuilder, ChannelConfig};
use ferrovia_mr::MrRegistry;
use ferrovia_ucx::{UcxContext, UcxTransport, UcxTransportBuilder};

use super::connection::{
    Settings, abandon, bound, channel, context, io_error, read_frame, transport_builder, ucx_error,
};
use super::front_door::{self, Frame, FrameReader, Read1};
use crate::by_address::error::ConnectError;
use crate::by_address::handshake::{self, Kind};

/// What bounds a listener.
#[derive(Debug, Clone, Copy)]
struct Limits {
    max_pending: usize,
    handshake_timeout: Duration,
}

/// How long the accepting thread sleeps between looks at the front door.
const LOOK_EVERY: Duration = Duration::from_millis(1);
/// Connections taken in per look, so each pending one is read often.
const ACCEPTS_PER_LOOK: usize = 16;
/// Refusals logged one by one; the rest are counted.
const LOGGED_REFUSALS: u64 = 8;

/// A UCX listener: the front door and the connections in their
/// handshake.
pub(crate) struct UcxSide {
    ctx: UcxContext,
    listener: TcpListener,
    local: SocketAddr,
    builder: UcxTransportBuilder,
    cfg: ChannelConfig,
    limits: Limits,
    pending: Mutex<VecDeque<Pending>>,
    refused: AtomicU64,
}

/// A connection whose request is not in yet.
struct Pending {
    stream: TcpStream,
    peer: SocketAddr,
    reader: FrameReader,
    until: Instant,
}

/// A client's request, its transport made, not yet answered.
pub(crate) struct UcxIncoming {
    /// `None` once answered.
    answer: Option<(UcxTransport, TcpStream)>,
    worker: Vec<u8>,
    peer: SocketAddr,
    cfg: ChannelConfig,
    /// The channel's registry, there before the answer.
    registry: MrRegistry,
}

impl Drop for UcxIncoming {
    /// An unanswered request is rejected, with no private data.
    fn drop(&mut self) {
        if let Some((_, mut stream)) = self.answer.take()
            && let Ok(data) = handshake::encode(Kind::Reject, &[], self.peer)
        {
            let _ = front_door::send(&mut stream, &Frame::Reject { data });
        }
    }
}

impl UcxSide {
    pub(crate) fn bind(
        addr: SocketAddr,
        channel: &ChannelBuilder,
        builder: &Settings,
        max_pending: usize,
        handshake_timeout: Duration,
    ) -> Result<UcxSide, ConnectError> {
        let limits = Limits {
            max_pending,
            handshake_timeout,
        };
        let listener = TcpListener::bind(addr).map_err(|e| match e.kind() {
            ErrorKind::AddrInUse => ConnectError::AddrInUse { addr },
            _ => ConnectError::backend(addr, e),
        })?;
        let local = listener
            .local_addr()
            .map_err(|e| ConnectError::backend(addr, e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| ConnectError::backend(addr, e))?;
        let (ctx, exposure) = context(local, local.ip())?;
        Ok(UcxSide {
            ctx,
            listener,
            local,
            builder: transport_builder(channel, builder.as_ref(), exposure),
            cfg: channel.config().clone(),
            limits,
            pending: Mutex::new(VecDeque::new()),
            refused: AtomicU64::new(0),
        })
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn refuse(&self, peer: SocketAddr, why: &str) {
        let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        if n <= LOGGED_REFUSALS {
            tracing::warn!("listener {}: dropped {peer}: {why}", self.local);
        } else {
            tracing::debug!(
                "listener {}: dropped {peer}: {why} ({n} so far)",
                self.local
            );
        }
    }

    /// Requests turned away or dropped so far.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Takes in the connections that arrived (a few per look); over the
    /// bound, the oldest in its handshake is dropped.
    fn take_in(&self, pending: &mut VecDeque<Pending>) {
        for _ in 0..ACCEPTS_PER_LOOK {
            let (stream, peer) = match self.listener.accept() {
                Ok(c) => c,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => {
                    // Out of descriptors and the like: shed, go on.
                    tracing::warn!("listener {}: accept: {e}", self.local);
                    if let Some(old) = pending.pop_front() {
                        self.refuse(old.peer, "dropped to free a descriptor");
                    }
                    return;
                }
            };
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            if pending.len() >= self.limits.max_pending
                && let Some(old) = pending.pop_front()
            {
                self.refuse(old.peer, "too many connections in their handshake");
            }
            pending.push_back(Pending {
                stream,
                peer,
                reader: FrameReader::default(),
                until: ferrovia_types::deadline_after(self.limits.handshake_timeout),
            });
        }
    }

    /// Reads every pending connection; the first whose request is whole,
    /// made into an incoming connection. Drops those that sent something
    /// else, closed, or ran out of time.
    fn ready(&self, pending: &mut VecDeque<Pending>) -> Option<(SocketAddr, Vec<u8>, UcxIncoming)> {
        let now = Instant::now();
        let mut i = 0;
        while i < pending.len() {
            let p = &mut pending[i];
            match p.reader.read(&mut p.stream) {
                Read1::More if now < p.until => i += 1,
                Read1::More => {
                    let p = pending.remove(i)?;
                    self.refuse(
                        p.peer,
                        &format!("sent no request within {:?}", self.limits.handshake_timeout),
                    );
                }
                Read1::Closed => {
                    let p = pending.remove(i)?;
                    self.refuse(p.peer, "closed before its request");
                }
                Read1::Bad(why) => {
                    let p = pending.remove(i)?;
                    self.refuse(p.peer, &why);
                }
                Read1::Frame(f) => {
                    let p = pending.remove(i)?;
                    match self.incoming(p.stream, p.peer, f) {
                        Ok(ready) => return Some(ready),
                        Err(why) => self.refuse(p.peer, &why),
                    }
                }
            }
        }
        None
    }

    /// A request that decoded, made into an incoming connection with a
    /// transport of its own.
    fn incoming(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        f: Frame,
    ) -> Result<(SocketAddr, Vec<u8>, UcxIncoming), String> {
        let Frame::Request { data, worker, .. } = f else {
            return Err(format!("expected a request, got {:?}", f.kind()));
        };
        let data = handshake::expect(Kind::Request, &data, peer)
            .map_err(|e| e.to_string())?
            .to_vec();
        stream
            .set_nonblocking(false)
            .map_err(|e| format!("socket: {e}"))?;
        let t = self
            .builder
            .clone()
            .start(&self.ctx)
            .map_err(|e| e.to_string())?;
        let incoming = UcxIncoming {
            registry: MrRegistry::with_registrar(t.registrar()),
            answer: Some((t, stream)),
            worker,
            peer,
            cfg: self.cfg.clone(),
        };
        Ok((peer, data, incoming))
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
                self.take_in(&mut pending);
                if let Some(ready) = self.ready(&mut pending) {
                    return Ok(ready);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ConnectError::Timeout {
                    what: "waiting for a connection request",
                    addr: self.local,
                    after: start.elapsed(),
                });
            }
            std::thread::sleep(left.min(LOOK_EVERY));
        }
    }
}

impl UcxIncoming {
    pub(crate) fn registry(&self) -> &MrRegistry {
        &self.registry
    }

    pub(crate) fn accept(
        mut self,
        client_data: Vec<u8>,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Channel, ConnectError> {
        let peer = self.peer;
        // Too much data: refused before anything is sent; dropping `self`
        // then rejects the request.
        let data = handshake::encode(Kind::Accept, private_data, peer)?;
        let Some((mut t, mut stream)) = self.answer.take() else {
            return Err(ConnectError::Protocol {
                addr: peer,
                reason: "the request was already answered".into(),
            });
        };
        let deadline = ferrovia_types::deadline_after(timeout);
        let start = Instant::now();
        // The endpoint exists before the client hears of this side, so
        // whatever it sends first finds it.
        if let Err(e) = t.connect_peer(&self.worker, peer) {
            abandon(t);
            return Err(ucx_error(e, peer));
        }
        let answer = Frame::Accept {
            data,
            worker: t.address().to_vec(),
        };
        let sent = bound(&stream, deadline).and_then(|()| front_door::send(&mut stream, &answer));
        if let Err(e) = sent {
            abandon(t);
            return Err(io_error(peer, e));
        }
        let outcome = match read_frame(&mut stream, deadline) {
            Read1::Frame(Frame::Ready) => Ok(()),
            Read1::Frame(f) => Err(ConnectError::Protocol {
                addr: peer,
                reason: format!("expected ready, got {:?}", f.kind()),
            }),
            Read1::Bad(reason) => Err(ConnectError::Protocol { addr: peer, reason }),
            Read1::Closed => Err(ConnectError::Disconnected {
                addr: peer,
                reason: "the client closed the connection before confirming".into(),
            }),
            Read1::More => Err(ConnectError::Timeout {
                what: "waiting for the client to confirm",
                addr: peer,
                after: start.elapsed(),
            }),
        };
        if let Err(e) = outcome.and_then(|()| t.watch_link(stream).map_err(|e| ucx_error(e, peer)))
        {
            abandon(t);
            return Err(e);
        }
        let registry = std::mem::replace(
            &mut self.registry,
            MrRegistry::with_registrar(t.registrar()),
        );
        channel(t, registry, self.cfg.clone(), peer, client_data)
    }

    pub(crate) fn reject(mut self, private_data: &[u8]) -> Result<(), ConnectError> {
        // Too much data: refused before anything is sent; dropping `self`
        // then rejects the request with none.
        let data = handshake::encode(Kind::Reject, private_data, self.peer)?;
        let Some((t, mut stream)) = self.answer.take() else {
            return Ok(());
        };
        drop(t);
        let deadline = Instant::now() + Duration::from_secs(1);
        bound(&stream, deadline)
            .and_then(|()| front_door::send(&mut stream, &Frame::Reject { data }))
            .map_err(|e| io_error(self.peer, e))
    }
}
