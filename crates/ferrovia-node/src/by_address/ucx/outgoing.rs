//! Connection by address on UCX, the client's side: a transport made for
//! the address (`resolve`), then the request through the listener's front
//! door, the answer, and the endpoints from the traded worker addresses.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use ferrovia_channel::{Channel, ChannelBuilder, ChannelConfig};
use ferrovia_mr::MrRegistry;
use ferrovia_ucx::UcxTransport;

use super::connection::{
    Settings, abandon, bound, channel, context, io_error, read_frame, transport_builder, ucx_error,
};
use super::front_door::{self, Frame, Read1};
use crate::by_address::error::ConnectError;
use crate::by_address::handshake::{self, Decoded, Kind};
use crate::{Backend, control};

/// A client's transport, its request not yet sent.
pub(crate) struct UcxOutgoing {
    t: UcxTransport,
    addr: SocketAddr,
    cfg: ChannelConfig,
    /// The channel's registry, there before the request.
    registry: MrRegistry,
}

/// Makes a transport for a connection to `addr` (nothing is sent yet).
pub(crate) fn resolve(
    addr: SocketAddr,
    settings: &ChannelBuilder,
    builder: &Settings,
) -> Result<UcxOutgoing, ConnectError> {
    let local = control::route_source(addr).map_err(|_| ConnectError::Unreachable {
        addr,
        reason: format!("no route: {}", no_route(addr).unwrap_or_default()),
    })?;
    let (ctx, exposure) = context(addr, local)?;
    let t = transport_builder(settings, builder.as_ref(), exposure)
        .start(&ctx)
        .map_err(|e| ucx_error(e, addr))?;
    Ok(UcxOutgoing {
        registry: MrRegistry::with_registrar(t.registrar()),
        t,
        addr,
        cfg: settings.config().clone(),
    })
}

/// A connect to the front door that failed, as a [`ConnectError`].
fn connect_failed(addr: SocketAddr, e: std::io::Error, start: Instant) -> ConnectError {
    match e.kind() {
        ErrorKind::ConnectionRefused => ConnectError::NotListening {
            addr,
            backend: Backend::Ucx,
        },
        ErrorKind::TimedOut | ErrorKind::WouldBlock => ConnectError::Timeout {
            what: "connecting to the listener",
            addr,
            after: start.elapsed(),
        },
        ErrorKind::NetworkUnreachable
        | ErrorKind::HostUnreachable
        | ErrorKind::AddrNotAvailable => ConnectError::Unreachable {
            addr,
            reason: e.to_string(),
        },
        _ => ConnectError::Unreachable {
            addr,
            reason: match no_route(addr) {
                Some(why) => format!("no route: {why}"),
                None => e.to_string(),
            },
        },
    }
}

impl UcxOutgoing {
    pub(crate) fn registry(&self) -> &MrRegistry {
        &self.registry
    }

    /// Sends the request with `private_data`, waits up to `timeout` for
    /// the answer, and confirms an accept.
    pub(crate) fn connect(
        self,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Channel, ConnectError> {
        let UcxOutgoing {
            mut t,
            addr,
            cfg,
            registry,
        } = self;
        let data = handshake::encode(Kind::Request, private_data, addr)?;
        let start = Instant::now();
        let deadline = start + timeout;
        let mut stream = TcpStream::connect_timeout(&addr, timeout.max(Duration::from_millis(1)))
            .map_err(|e| connect_failed(addr, e, start))?;
        let request = Frame::Request {
            token: Vec::new(),
            data,
            worker: t.address().to_vec(),
        };
        bound(&stream, deadline)
            .and_then(|()| front_door::send(&mut stream, &request))
            .map_err(|e| io_error(addr, e))?;
        let (answer, worker) = match read_frame(&mut stream, deadline) {
            Read1::Frame(Frame::Accept { data, worker }) => match handshake::decode(&data) {
                Decoded::Ours(Kind::Accept, d) => (d.to_vec(), worker),
                _ => {
                    return Err(handshake::expect(Kind::Accept, &data, addr)
                        .map(drop)
                        .err()
                        .unwrap_or(ConnectError::Protocol {
                            addr,
                            reason: "an unexpected answer".into(),
                        }));
                }
            },
            Read1::Frame(Frame::Reject { data }) => {
                return Err(ConnectError::Rejected {
                    addr,
                    private_data: handshake::expect(Kind::Reject, &data, addr)?.to_vec(),
                });
            }
            Read1::Frame(f) => {
                return Err(ConnectError::Protocol {
                    addr,
                    reason: format!("expected an accept, got {:?}", f.kind()),
                });
            }
            Read1::Bad(reason) => return Err(ConnectError::Protocol { addr, reason }),
            Read1::Closed => {
                return Err(ConnectError::Refused {
                    addr,
                    reason: "the listener closed the connection before answering (too many connections in their handshake, or it closed)".into(),
                });
            }
            Read1::More => {
                return Err(ConnectError::Timeout {
                    what: "waiting for the server's answer",
                    addr,
                    after: start.elapsed(),
                });
            }
        };
        if let Err(e) = t.connect_peer(&worker, addr) {
            abandon(t);
            return Err(ucx_error(e, addr));
        }
        let confirmed = bound(&stream, deadline)
            .and_then(|()| front_door::send(&mut stream, &Frame::Ready))
            .map_err(|e| io_error(addr, e))
            .and_then(|()| t.watch_link(stream).map_err(|e| ucx_error(e, addr)));
        if let Err(e) = confirmed {
            abandon(t);
            return Err(e);
        }
        channel(t, registry, cfg, addr, answer)
    }
}

/// Why `addr` has no route, if the routing table says so (a UDP socket's
/// connect asks it without sending anything).
fn no_route(addr: SocketAddr) -> Option<String> {
    let any: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0".parse().ok()?
    } else {
        "[::]:0".parse().ok()?
    };
    let s = std::net::UdpSocket::bind(any).ok()?;
    match s.connect(addr) {
        Ok(()) => None,
        Err(e) => Some(e.to_string()),
    }
}
