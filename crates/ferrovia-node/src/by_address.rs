//! Connecting by address, on whichever backend `Node` would pick: a
//! [`Listener`] bound to an address and port accepts clients as they come,
//! each into a [`Channel`] of its own; a client [`connect`]s to the
//! address. Both ends exchange a little private data while connecting
//! (at most [`CONNECT_DATA_MAX`] bytes with the request,
//! [`ACCEPT_DATA_MAX`] with the accept, [`REJECT_DATA_MAX`] with a
//! rejection, on either backend), and every wait has a deadline.
//!
//! - verbs: the RDMA connection manager (`ferrovia_verbs::cm`); the
//!   private data rides in its messages, and a peer's disconnect
//!   (`RDMA_CM_EVENT_DISCONNECTED`) flushes the channel, failing its
//!   pending work with [`TransportError::Disconnected`] naming the
//!   address.
//! - UCX: `ucp_listener_create` and `ucp_ep_create` with the socket
//!   address or the client's request, one UCX worker per connection; the
//!   private data rides in handshake messages, since UCX's handshake
//!   carries none. A peer's endpoint error fails the pending work the same
//!   way.
//!
//! Both ends must run the same backend (`FERROVIA_BACKEND` or
//! [`ListenerBuilder::backend`] / [`Connector::backend`]): a verbs client
//! finds nothing listening at a UCX listener's address, and the reverse.
//!
//! [`TransportError::Disconnected`]: ferrovia_channel::TransportError::Disconnected

use std::net::SocketAddr;
use std::time::Duration;

use ferrovia_channel::{Channel, ChannelBuilder};
use ferrovia_mr::MrRegistry;

use crate::backend::{VerbsSettings, choose};
use crate::backend_name::Backend;

mod error;
mod handshake;
mod ucx;
mod verbs;

pub use error::ConnectError;
pub use handshake::{ACCEPT_DATA_MAX, CONNECT_DATA_MAX, REJECT_DATA_MAX};

/// Requests in their handshake at once, by default.
const MAX_PENDING: usize = 16;
/// How long a client has to send its request, by default.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The backend `explicit` names, else `FERROVIA_BACKEND`, else as
/// [`Node`](crate::Node) picks it; `verbs` gets the verbs device's
/// protection domain when verbs is picked.
fn pick(
    explicit: Option<Backend>,
    verbs: VerbsSettings,
    addr: SocketAddr,
) -> Result<(Backend, VerbsSettings), ConnectError> {
    let explicit = match explicit {
        Some(b) => Some(b),
        None => Backend::from_env().map_err(|e| ConnectError::backend(addr, e))?,
    };
    choose(explicit, verbs).map_err(|e| ConnectError::backend(addr, e))
}

/// Settings of a [`Listener`].
#[derive(Debug, Clone)]
pub struct ListenerBuilder {
    addr: SocketAddr,
    backend: Option<Backend>,
    channel: ChannelBuilder,
    verbs: VerbsSettings,
    max_pending: usize,
    handshake_timeout: Duration,
    ucx: ucx::Settings,
}

impl ListenerBuilder {
    /// The backend (default: `FERROVIA_BACKEND`, else verbs when a device
    /// with an active port opens, else UCX).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = Some(backend);
        self
    }

    /// The settings of every accepted channel (queue depths, timeouts;
    /// default: [`ChannelBuilder::default`]).
    pub fn channel(mut self, channel: ChannelBuilder) -> Self {
        self.channel = channel;
        self
    }

    /// The verbs settings of every accepted channel (limits, connection
    /// parameters; the device is the one the request arrives on).
    #[cfg(feature = "verbs")]
    pub fn verbs(mut self, verbs: ferrovia_verbs_transport::VerbsConfig) -> Self {
        self.verbs = self.verbs.with_config(verbs);
        self
    }

    /// How many requests may wait to be answered (default 16): verbs, the
    /// connection manager's backlog; UCX, the requests in their handshake
    /// at once (each holds a UCX worker and its progress thread), beyond
    /// which requests are rejected at once.
    pub fn max_pending(mut self, n: u16) -> Self {
        self.max_pending = usize::from(n.max(1));
        self
    }

    /// How long a UCX client has, once connected, to send its request
    /// (default 5 s); then it is dropped. (On verbs the request arrives
    /// whole.)
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// The settings of the UCX transports of accepted connections
    /// (default: from the channel settings).
    #[cfg(feature = "ucx")]
    pub fn ucx(mut self, builder: ferrovia_ucx::UcxTransportBuilder) -> Self {
        self.ucx = Some(builder);
        self
    }

    /// Binds the address (port 0: the system picks one) and listens.
    pub fn bind(self) -> Result<Listener, ConnectError> {
        let addr = self.addr;
        let (backend, settings) = pick(self.backend, self.verbs, addr)?;
        let (channel, pending, handshake) =
            (self.channel, self.max_pending, self.handshake_timeout);
        let inner = match backend {
            Backend::Verbs => Inner::Verbs(verbs::VerbsListener::bind(
                addr, &channel, &settings, pending,
            )?),
            Backend::Ucx => Inner::Ucx(ucx::UcxSide::bind(
                addr, &channel, &self.ucx, pending, handshake,
            )?),
        };
        let listener = Listener { backend, inner };
        tracing::info!(
            "listening on {} ({} backend)",
            listener.local_addr(),
            backend
        );
        Ok(listener)
    }
}

/// Listens for connections on an address and port; each accepted client
/// gets a [`Channel`] of its own.
///
/// Clients are accepted in any order, and each connection lives on its
/// own: a client that connects and vanishes fails only its own request,
/// and a peer that disconnects later fails only its own channel's work.
/// Why a channel per client and not one growing multi-channel: a
/// channel's peers are fixed when it is made (the scoped core sizes its
/// bookkeeping by them), and separate channels keep one client's failure
/// and flush away from the others. The cost: memory is registered per
/// channel (`channel.registry()`), not once for every client.
///
/// ```no_run
/// use std::time::Duration;
/// use ferrovia_node::Listener;
///
/// # fn main() -> Result<(), ferrovia_node::ConnectError> {
/// let listener = Listener::bind("0.0.0.0:7471".parse().unwrap())?;
/// let t = Duration::from_secs(10);
/// loop {
///     let incoming = listener.accept(t)?;
///     if incoming.private_data() == b"let me in" {
///         let channel = incoming.accept(b"welcome", t)?;
///         // ... channel.scope(|s| ...) as any channel
///     } else {
///         incoming.reject(b"who are you?")?;
///     }
/// }
/// # }
/// ```
pub struct Listener {
    backend: Backend,
    inner: Inner,
}

// A backend this build lacks is an uninhabited stand-in, so one variant
// can be empty; with both built, the variants are of a size.
#[allow(clippy::large_enum_variant)]
enum Inner {
    Verbs(verbs::VerbsListener),
    Ucx(ucx::UcxSide),
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("local_addr", &self.local_addr())
            .field("backend", &self.backend)
            .finish()
    }
}

impl Listener {
    /// Listens on `addr` with the default settings.
    pub fn bind(addr: SocketAddr) -> Result<Listener, ConnectError> {
        Listener::builder(addr).bind()
    }

    /// Settings for a listener on `addr`.
    pub fn builder(addr: SocketAddr) -> ListenerBuilder {
        ListenerBuilder {
            addr,
            backend: None,
            channel: ChannelBuilder::default(),
            verbs: VerbsSettings::default(),
            max_pending: MAX_PENDING,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            ucx: ucx::Settings::default(),
        }
    }

    /// The bound address, with the port the system chose for port 0.
    pub fn local_addr(&self) -> SocketAddr {
        match &self.inner {
            Inner::Verbs(l) => l.local_addr(),
            Inner::Ucx(l) => l.local_addr(),
        }
    }

    /// The backend it listens on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Requests dropped or turned away so far without reaching
    /// [`Listener::accept`] (UCX: over the pending bound, no request in
    /// time, gone; verbs: badly framed).
    pub fn refused(&self) -> u64 {
        match &self.inner {
            Inner::Verbs(l) => l.refused(),
            Inner::Ucx(l) => l.refused(),
        }
    }

    /// Waits up to `timeout` for the next client's request.
    pub fn accept(&self, timeout: Duration) -> Result<Incoming, ConnectError> {
        let (peer, private_data, inner) = match &self.inner {
            Inner::Verbs(l) => {
                let (p, d, i) = l.accept(timeout)?;
                (p, d, IncomingInner::Verbs(i))
            }
            Inner::Ucx(l) => {
                let (p, d, i) = l.accept(timeout)?;
                (p, d, IncomingInner::Ucx(i))
            }
        };
        Ok(Incoming {
            peer,
            private_data,
            inner,
        })
    }
}

/// A client's request: [`Incoming::accept`] it into a [`Channel`], or
/// [`Incoming::reject`] it. Dropping it rejects it.
pub struct Incoming {
    peer: SocketAddr,
    private_data: Vec<u8>,
    inner: IncomingInner,
}

// A backend this build lacks is an uninhabited stand-in, so one variant
// can be empty; with both built, the variants are of a size.
#[allow(clippy::large_enum_variant)]
enum IncomingInner {
    Verbs(verbs::VerbsIncoming),
    Ucx(ucx::UcxIncoming),
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming")
            .field("peer", &self.peer)
            .field("private_data", &self.private_data.len())
            .finish_non_exhaustive()
    }
}

impl Incoming {
    /// The client's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The private data the client sent with its request: exactly what a
    /// ferrovia client sent; from another program (a C client of the
    /// connection manager), the whole area as it arrived.
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The registry of the channel [`Incoming::accept`] makes, there
    /// already: register memory here to answer with its descriptor
    /// (`registration().remote()?.encode()` fits in the answer).
    pub fn registry(&self) -> &MrRegistry {
        match &self.inner {
            IncomingInner::Verbs(i) => i.registry(),
            IncomingInner::Ucx(i) => i.registry(),
        }
    }

    /// Accepts, answering with `private_data` (at most
    /// [`ACCEPT_DATA_MAX`] bytes), and waits up to `timeout` for the client
    /// to confirm. The channel's
    /// [`peer_private_data`](Channel::peer_private_data) is the client's
    /// request data.
    pub fn accept(self, private_data: &[u8], timeout: Duration) -> Result<Channel, ConnectError> {
        match self.inner {
            IncomingInner::Verbs(i) => i.accept(self.private_data, private_data, timeout),
            IncomingInner::Ucx(i) => i.accept(self.private_data, private_data, timeout),
        }
    }

    /// Rejects, with `private_data` (at most [`REJECT_DATA_MAX`] bytes):
    /// the client's connect fails with [`ConnectError::Rejected`]
    /// carrying it.
    pub fn reject(self, private_data: &[u8]) -> Result<(), ConnectError> {
        match self.inner {
            IncomingInner::Verbs(i) => i.reject(private_data),
            IncomingInner::Ucx(i) => i.reject(private_data),
        }
    }
}

/// Settings of an outgoing connection by address.
#[derive(Debug, Clone, Default)]
pub struct Connector {
    backend: Option<Backend>,
    channel: ChannelBuilder,
    verbs: VerbsSettings,
    ucx: ucx::Settings,
}

impl Connector {
    /// Default settings.
    pub fn new() -> Connector {
        Connector::default()
    }

    /// The backend (default: as [`ListenerBuilder::backend`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = Some(backend);
        self
    }

    /// The channel's settings.
    pub fn channel(mut self, channel: ChannelBuilder) -> Self {
        self.channel = channel;
        self
    }

    /// The verbs settings (limits, connection parameters; the device is
    /// the one the address resolves to).
    #[cfg(feature = "verbs")]
    pub fn verbs(mut self, verbs: ferrovia_verbs_transport::VerbsConfig) -> Self {
        self.verbs = self.verbs.with_config(verbs);
        self
    }

    /// The UCX transport's settings (default: from the channel settings).
    #[cfg(feature = "ucx")]
    pub fn ucx(mut self, builder: ferrovia_ucx::UcxTransportBuilder) -> Self {
        self.ucx = Some(builder);
        self
    }

    /// Connects to the listener at `addr` with `private_data` (at most
    /// [`CONNECT_DATA_MAX`] bytes), within `timeout`. The channel's
    /// [`peer_private_data`](Channel::peer_private_data) is the server's
    /// answer.
    pub fn connect(
        &self,
        addr: SocketAddr,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Channel, ConnectError> {
        let start = std::time::Instant::now();
        let outgoing = self.resolve(addr, timeout)?;
        let left = timeout.saturating_sub(start.elapsed());
        outgoing.connect(private_data, left)
    }

    /// The first half of [`Connector::connect`], within `timeout`: finds
    /// the way to `addr` (verbs: resolves the address and route, makes
    /// the queue pair on that device; UCX: makes the endpoint) and sends
    /// nothing yet, so memory can be registered first
    /// ([`Outgoing::registry`]) and its descriptor sent with the request.
    pub fn resolve(&self, addr: SocketAddr, timeout: Duration) -> Result<Outgoing, ConnectError> {
        let (backend, settings) = pick(self.backend, self.verbs.clone(), addr)?;
        let channel = &self.channel;
        let inner = match backend {
            Backend::Verbs => {
                OutgoingInner::Verbs(verbs::resolve(addr, channel, &settings, timeout)?)
            }
            Backend::Ucx => OutgoingInner::Ucx(ucx::resolve(addr, channel, &self.ucx)?),
        };
        Ok(Outgoing { addr, inner })
    }
}

/// A connection on its way: the way to the address found, the request not
/// sent yet ([`Connector::resolve`]).
pub struct Outgoing {
    addr: SocketAddr,
    inner: OutgoingInner,
}

// A backend this build lacks is an uninhabited stand-in, so one variant
// can be empty; with both built, the variants are of a size.
#[allow(clippy::large_enum_variant)]
enum OutgoingInner {
    Verbs(verbs::VerbsOutgoing),
    Ucx(ucx::UcxOutgoing),
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outgoing")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Outgoing {
    /// The address it goes to.
    pub fn peer_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The registry of the channel [`Outgoing::connect`] makes, there
    /// already: register memory here to send its descriptor with the
    /// request.
    pub fn registry(&self) -> &MrRegistry {
        match &self.inner {
            OutgoingInner::Verbs(o) => o.registry(),
            OutgoingInner::Ucx(o) => o.registry(),
        }
    }

    /// Sends the request with `private_data` (at most
    /// [`CONNECT_DATA_MAX`] bytes) and waits up to `timeout` for the
    /// answer.
    pub fn connect(self, private_data: &[u8], timeout: Duration) -> Result<Channel, ConnectError> {
        match self.inner {
            OutgoingInner::Verbs(o) => o.connect(private_data, timeout),
            OutgoingInner::Ucx(o) => o.connect(private_data, timeout),
        }
    }
}

/// An address of this host that clients of `backend` on this host reach
/// it on, for programs that start their own clients (examples, tests):
/// verbs, the IPv4 address behind the RDMA device's RoCE v2 GID
/// (`FERROVIA_DEVICE`, else the first device with an active port; `None`
/// on InfiniBand or without a device); UCX, loopback. A server reached
/// from other hosts listens on its network address instead.
pub fn local_ip(backend: Backend) -> Option<std::net::IpAddr> {
    match backend {
        Backend::Verbs => verbs::local_ip(),
        Backend::Ucx => Some(std::net::Ipv4Addr::LOCALHOST.into()),
    }
}

/// Connects to the listener at `addr` with `private_data` (at most
/// [`CONNECT_DATA_MAX`] bytes) within `timeout`, on the backend `Node`
/// would pick; the shorthand of [`Connector::connect`].
///
/// ```no_run
/// use std::time::Duration;
///
/// # fn main() -> Result<(), ferrovia_node::ConnectError> {
/// let channel = ferrovia_node::connect("192.0.2.1:7471".parse().unwrap(), b"let me in", Duration::from_secs(10))?;
/// assert_eq!(channel.peer_private_data(), b"welcome");
/// # Ok(())
/// # }
/// ```
pub fn connect(
    addr: SocketAddr,
    private_data: &[u8],
    timeout: Duration,
) -> Result<Channel, ConnectError> {
    Connector::new().connect(addr, private_data, timeout)
}
