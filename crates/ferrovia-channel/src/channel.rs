//! `Channel`: one reliable connection with scoped posting, over any
//! transport (verbs RC queue pairs, UCX, or another [`Transport`]).

use std::net::SocketAddr;
use std::sync::Arc;

use ferrovia_mr::{MrRegistry, RemoteMemoryRegion};

use crate::atomic::AtomicWorkRequest;
use crate::config::ChannelConfig;
use crate::core::ChannelCore;
use crate::element::{Gather, Scatter};
use crate::error::{ScopeError, TransportError, TransportResult};
use crate::multi::MultiChannel;
use crate::request::{ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest, WriteWorkRequest};
use crate::scope::{PollingScope, ScopeTarget, ScopedPendingWork, Unpolled, run_scope};
use crate::seam::Transport;

/// One reliable connection to one peer, with scoped posting.
///
/// Built by a backend: on verbs by `VerbsBuilder::build` in
/// `ferrovia-verbs-transport` (an RC queue pair, connected by exchanging
/// endpoints out of band, its `VerbsChannel` methods), over any connected
/// one-peer [`Transport`] with [`Channel::over`], or by address (a
/// listener and `connect`, in `ferrovia-node`). The scoped API is the same
/// whatever the transport.
pub struct Channel {
    /// A channel is a multi-channel of one peer with a single-peer API.
    multi: MultiChannel,
    /// Where the peer was reached and what it said, for a connection made
    /// by address.
    peer: Option<PeerInfo>,
}

/// What a connection made by address knows of its peer.
struct PeerInfo {
    addr: SocketAddr,
    private_data: Vec<u8>,
}

impl ScopeTarget for Channel {
    fn core(&self) -> &ChannelCore {
        self.multi.core()
    }
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("peer_addr", &self.peer_addr())
            .finish_non_exhaustive()
    }
}

impl Channel {
    /// A channel over a [`MultiChannel`] of exactly one peer.
    pub fn from_multi(multi: MultiChannel) -> TransportResult<Channel> {
        match multi.peers() {
            1 => Ok(Channel { multi, peer: None }),
            n => Err(TransportError::Config(format!(
                "a channel has exactly one peer; this transport has {n}"
            ))),
        }
    }

    /// A channel over an already connected one-peer `transport` whose
    /// memory `registry` registers (UCX, or a test double).
    pub fn over(
        transport: Arc<dyn Transport>,
        registry: MrRegistry,
        cfg: ChannelConfig,
    ) -> TransportResult<Channel> {
        Channel::from_multi(MultiChannel::over(transport, registry, cfg))
    }

    /// Records where the peer was reached and the private data it sent
    /// while connecting (for a connection made by address).
    pub fn with_peer(mut self, addr: SocketAddr, private_data: Vec<u8>) -> Channel {
        self.peer = Some(PeerInfo { addr, private_data });
        self
    }

    /// The peer's address, for a connection made by address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer.as_ref().map(|p| p.addr)
    }

    /// The private data the peer sent while connecting (a client's
    /// request, on the accepting side; the server's answer, on the
    /// connecting side); empty when there was none.
    pub fn peer_private_data(&self) -> &[u8] {
        self.peer.as_ref().map_or(&[], |p| &p.private_data)
    }

    /// Whether the peer is known to be gone (it disconnected, or its
    /// endpoint failed): reads the connection's pending events. Work with
    /// it then fails as [`TransportError::Disconnected`].
    pub fn is_disconnected(&self) -> bool {
        self.multi.core().transport.disconnected(0).is_some()
    }

    /// The multi-channel underneath (one peer, index 0).
    pub fn as_multi(&self) -> &MultiChannel {
        &self.multi
    }

    /// The multi-channel underneath, to connect or renew its peer (index
    /// 0) through a backend's extension methods.
    pub fn as_multi_mut(&mut self) -> &mut MultiChannel {
        &mut self.multi
    }
}

impl Channel {
    /// What this channel did with its peer (index 0) until now (see
    /// [`ChannelStats`](crate::ChannelStats)).
    pub fn stats(&self) -> crate::ChannelStats {
        self.multi.stats()
    }

    /// A registry for buffers used on this channel.
    pub fn registry(&self) -> &MrRegistry {
        self.multi.registry()
    }

    /// Runs `f` with a [`PollingScope`]; every request posted in it is
    /// complete (or flushed) when this returns, and unpolled requests are
    /// polled to completion at the end.
    pub fn scope<'env, F, T, E>(&'env mut self, f: F) -> Result<T, ScopeError<E>>
    where
        F: for<'scope> FnOnce(&mut PollingScope<'scope, 'env, Channel>) -> Result<T, E>,
    {
        run_scope(&*self, Unpolled::Drain, f)
    }

    /// Like [`Channel::scope`], but the closure is expected to poll every
    /// request it posts: any it leaves are still drained (for safety) and
    /// then reported in the drain error's `unpolled` count.
    pub fn manual_scope<'env, F, T, E>(&'env mut self, f: F) -> Result<T, ScopeError<E>>
    where
        F: for<'scope> FnOnce(&mut PollingScope<'scope, 'env, Channel>) -> Result<T, E>,
    {
        run_scope(&*self, Unpolled::Report, f)
    }

    fn one<'env, T>(
        &'env mut self,
        f: impl for<'s> FnOnce(&mut PollingScope<'s, 'env, Channel>) -> TransportResult<T>,
    ) -> TransportResult<T> {
        self.scope(f).map_err(|e| match e {
            ScopeError::Closure(e) | ScopeError::Both { closure: e, .. } => e,
            ScopeError::Drain(d) => match d.failed.first() {
                Some(c) => TransportError::Completion(*c),
                None => TransportError::Config(d.to_string()),
            },
            nested @ ScopeError::Nested => TransportError::Config(nested.to_string()),
        })
    }

    /// Sends `gather` as one message and waits for its completion.
    pub fn send<'env>(&'env mut self, gather: &[Gather<'env>]) -> TransportResult<()> {
        let timeout = self.core().cfg.op_timeout;
        self.one(|s| {
            s.post_send(SendWorkRequest::new(gather)?)?
                .wait(timeout)
                .map(drop)
        })
    }

    /// Receives one message into `buf`; returns its length.
    pub fn receive<'env>(&'env mut self, buf: Scatter<'env>) -> TransportResult<usize> {
        let timeout = self.core().cfg.op_timeout;
        self.one(|s| {
            Ok(s.post_receive(ReceiveWorkRequest::new(buf))?
                .wait(timeout)?
                .byte_len())
        })
    }

    /// RDMA-writes `gather` to `remote` and waits.
    pub fn write<'env>(
        &'env mut self,
        gather: &[Gather<'env>],
        remote: RemoteMemoryRegion,
    ) -> TransportResult<()> {
        let timeout = self.core().cfg.op_timeout;
        self.one(|s| {
            s.post_write(WriteWorkRequest::new(gather, remote)?)?
                .wait(timeout)
                .map(drop)
        })
    }

    /// RDMA-reads `remote` into `buf` and waits.
    pub fn read<'env>(
        &'env mut self,
        buf: Scatter<'env>,
        remote: RemoteMemoryRegion,
    ) -> TransportResult<()> {
        let timeout = self.core().cfg.op_timeout;
        self.one(|s| {
            s.post_read(ReadWorkRequest::new(buf, remote)?)?
                .wait(timeout)
                .map(drop)
        })
    }
}

impl<'scope, 'env> PollingScope<'scope, 'env, Channel> {
    /// Posts a send, returning a handle for polling.
    pub fn post_send(
        &mut self,
        wr: SendWorkRequest<'_, 'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.send_to(0, wr)
    }

    /// Posts a receive, returning a handle for polling.
    pub fn post_receive(
        &mut self,
        wr: ReceiveWorkRequest<'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.receive_from(0, wr)
    }

    /// Posts an RDMA write, returning a handle for polling.
    pub fn post_write(
        &mut self,
        wr: WriteWorkRequest<'_, 'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.write_to(0, wr)
    }

    /// Posts an RDMA read, returning a handle for polling.
    pub fn post_read(
        &mut self,
        wr: ReadWorkRequest<'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.read_from(0, wr)
    }

    /// Posts a remote atomic (see
    /// [`PollingScope::post_atomic`] on a `MultiChannel`).
    pub fn post_atomic(
        &mut self,
        wr: AtomicWorkRequest<'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.atomic_to(0, wr)
    }

    /// Posts several writes as one list (see
    /// [`PollingScope::post_write_list`] on a `MultiChannel`): one handle,
    /// the last request's, which completes once all have.
    pub fn post_write_list(
        &mut self,
        wrs: &[WriteWorkRequest<'_, 'env>],
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.list_to(0, wrs)
    }

    /// Posts several sends as one list (see
    /// [`PollingScope::post_write_list`]).
    pub fn post_send_list(
        &mut self,
        wrs: &[SendWorkRequest<'_, 'env>],
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.list_to(0, wrs)
    }
}
