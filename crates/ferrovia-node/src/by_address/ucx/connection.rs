//! What both sides of a UCX connection by address share: the UCX
//! context, transport and channel a connection gets, and the bounded
//! blocking reads of the front door.

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrovia_channel::transport::Transport;
use ferrovia_channel::{Channel, ChannelBuilder, ChannelConfig};
use ferrovia_mr::MrRegistry;
use ferrovia_ucx::{Exposure, UcxContext, UcxError, UcxTransport, UcxTransportBuilder};

use super::front_door::{FrameReader, Read1};
use crate::by_address::error::ConnectError;

/// The UCX settings a listener or connector was given, if any (default:
/// from the channel settings).
pub(crate) type Settings = Option<UcxTransportBuilder>;

/// The transport settings of `channel`, unless `given`, for a context
/// confined to `exposure`.
pub(super) fn transport_builder(
    channel: &ChannelBuilder,
    given: Option<&UcxTransportBuilder>,
    exposure: Exposure,
) -> UcxTransportBuilder {
    if let Some(b) = given {
        return b.clone();
    }
    let mut b = UcxTransport::builder().shared_receives(channel.config().shared_receives);
    if exposure.shared_memory_only(&|k| std::env::var(k).ok()) {
        // UCX 1.13's shared memory has no peer failure handling: the link
        // tells instead.
        b = b.detect_peer_failure(false);
    }
    let cfg = channel.config();
    b.depths(cfg.send_depth, cfg.recv_depth)
}

/// A UCX context for connections with `addr` that listens only where
/// they come from: `local`, this side's address toward it (a loopback one
/// keeps UCX on shared memory).
pub(super) fn context(
    addr: SocketAddr,
    local: std::net::IpAddr,
) -> Result<(UcxContext, Exposure), ConnectError> {
    let exposure = Exposure::for_address(local);
    UcxContext::for_address(addr, exposure, &[])
        .map(|c| (c, exposure))
        .map_err(|e| ConnectError::backend(addr, e))
}

/// The channel over a transport whose handshake is done.
pub(super) fn channel(
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
pub(super) fn abandon(t: UcxTransport) {
    if t.peer_addr().is_some() {
        let _ = Transport::flush(&t, 0);
    }
    drop(t);
}

/// Sets both timeouts of a blocking stream to what is left until
/// `deadline` (at least 1 ms: zero means "none").
pub(super) fn bound(s: &TcpStream, deadline: Instant) -> std::io::Result<()> {
    let t = Some(
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1)),
    );
    s.set_read_timeout(t)?;
    s.set_write_timeout(t)
}

/// Reads one frame from a blocking stream before `deadline`.
pub(super) fn read_frame(s: &mut TcpStream, deadline: Instant) -> Read1 {
    let mut r = FrameReader::default();
    loop {
        if bound(s, deadline).is_err() {
            return Read1::Closed;
        }
        match r.read(s) {
            Read1::More if Instant::now() < deadline => continue,
            other => return other,
        }
    }
}

pub(super) fn io_error(addr: SocketAddr, e: std::io::Error) -> ConnectError {
    ConnectError::Disconnected {
        addr,
        reason: e.to_string(),
    }
}

pub(super) fn ucx_error(e: UcxError, addr: SocketAddr) -> ConnectError {
    ConnectError::backend(addr, e)
}
