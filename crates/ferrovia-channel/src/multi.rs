//! `MultiChannel`: one connection per peer over one protection domain.

use std::sync::Arc;

use ferrovia_mr::MrRegistry;
#[cfg(feature = "verbs")]
use ferrovia_verbs::{Endpoint, ProtectionDomain};

use crate::atomic::PeerAtomicWorkRequest;
use crate::builder::ChannelBuilder;
use crate::config::ChannelConfig;
use crate::core::ChannelCore;
use crate::error::{ScopeError, TransportError, TransportResult};
use crate::request::{
    PeerReadWorkRequest, PeerReceiveWorkRequest, PeerSendWorkRequest, PeerWriteWorkRequest,
    ReceiveWorkRequest, SendWorkRequest,
};
use crate::scope::{PollingScope, ScopeTarget, ScopedPendingWork, Unpolled, run_scope};
use crate::transport::Transport;
#[cfg(feature = "verbs")]
use crate::verbs_transport::VerbsTransport;

/// A [`ScopeTarget`] with several peers, addressed by index: gives its
/// scopes the `Peer*` posts and the scatter/gather/multicast posts.
/// Implemented by [`MultiChannel`] and by types built on one.
pub trait MultiPeer: ScopeTarget {}

/// One reliable connection per peer sharing one completion stream: verbs
/// RC queue pairs in one protection domain ([`ChannelBuilder::build_multi`]),
/// or any other [`Transport`] ([`MultiChannel::over`], e.g. UCX).
pub struct MultiChannel {
    core: ChannelCore,
    /// Set when the connections are verbs queue pairs.
    #[cfg(feature = "verbs")]
    verbs: Option<Arc<VerbsTransport>>,
    registry: MrRegistry,
}

#[cfg(feature = "verbs")]
impl ChannelBuilder {
    /// Creates a [`MultiChannel`] with `peers` queue pairs; connect each
    /// with [`MultiChannel::connect`].
    pub fn build_multi(self, peers: usize) -> TransportResult<MultiChannel> {
        self.validate()?;
        let pd = self.open_pd()?;
        let verbs = Arc::new(VerbsTransport::new(&pd, peers, &self.cfg)?);
        Ok(MultiChannel {
            core: ChannelCore::new(verbs.clone(), self.cfg),
            registry: MrRegistry::new(&pd),
            verbs: Some(verbs),
        })
    }
}

impl ScopeTarget for MultiChannel {
    fn core(&self) -> &ChannelCore {
        &self.core
    }
}

impl MultiPeer for MultiChannel {}

impl MultiChannel {
    /// A builder; finish with [`ChannelBuilder::build_multi`].
    pub fn builder() -> ChannelBuilder {
        ChannelBuilder::default()
    }

    /// A multi-channel over verbs queue pairs connected (or to be
    /// connected) through `transport`, e.g. by the connection manager.
    /// `registry` registers in the transport's protection domain
    /// (`MrRegistry::new(transport.pd())`, perhaps made earlier to put a
    /// descriptor in the connection's private data; a registry of another
    /// PD makes every post fail with a protection error). `cfg` should be
    /// what the transport was built with.
    #[cfg(feature = "verbs")]
    pub fn over_verbs(
        transport: VerbsTransport,
        registry: MrRegistry,
        cfg: ChannelConfig,
    ) -> MultiChannel {
        let verbs = Arc::new(transport);
        MultiChannel {
            core: ChannelCore::new(verbs.clone(), cfg),
            registry,
            verbs: Some(verbs),
        }
    }

    /// A multi-channel over an already connected `transport` whose memory
    /// `registry` registers (UCX, or a test double).
    pub fn over(
        transport: Arc<dyn Transport>,
        registry: MrRegistry,
        cfg: ChannelConfig,
    ) -> MultiChannel {
        MultiChannel {
            core: ChannelCore::new(transport, cfg),
            #[cfg(feature = "verbs")]
            verbs: None,
            registry,
        }
    }

    /// Replaces the connection to `peer` through the transport
    /// ([`Transport::renew`]: a new UCX endpoint, or a fresh verbs queue
    /// pair whose endpoint the bytes encode), for any transport, those
    /// connected outside the channel included; returns what the peer's
    /// renewed side needs (hand it to its
    /// [`MultiChannel::connect_renewed`]). Posts to `peer` fail with
    /// [`TransportError::Broken`] until then. A verbs channel may also use
    /// [`MultiChannel::reconnect`], which speaks in endpoints.
    pub fn renew_transport(&mut self, peer: usize) -> TransportResult<Vec<u8>> {
        let count = self.num_channels();
        if peer >= count {
            return Err(TransportError::NoSuchPeer { peer, count });
        }
        self.core.mark_broken(peer);
        self.core.transport.renew(peer)
    }

    /// The second half of [`MultiChannel::renew_transport`]: connects the
    /// renewed side to the peer's, `theirs`; posts to `peer` work again.
    pub fn connect_renewed(&mut self, peer: usize, theirs: &[u8]) -> TransportResult<()> {
        self.core.transport.reconnect(peer, theirs)?;
        self.core.mark_connected(peer);
        Ok(())
    }

    /// Messages dropped because they came on a replaced connection (sent
    /// before a reconnect) or on one this side broke: counted by
    /// transports that can receive such messages (UCX); always 0 on verbs,
    /// where a new queue pair cannot receive an old one's messages.
    pub fn stale_dropped(&self) -> u64 {
        self.core.transport.stale_dropped()
    }

    /// Number of peers (connections).
    pub fn num_channels(&self) -> usize {
        self.core.peers()
    }

    /// What peer `peer` needs to connect its side to us (verbs only).
    #[cfg(feature = "verbs")]
    pub fn endpoint(&self, peer: usize) -> TransportResult<Endpoint> {
        self.check(peer)?;
        self.verbs_transport()?.endpoint(peer)
    }

    /// Connects the queue pair of `peer` to its endpoint (verbs only; other
    /// transports connect before [`MultiChannel::over`]).
    #[cfg(feature = "verbs")]
    pub fn connect(&mut self, peer: usize, remote: &Endpoint) -> TransportResult<()> {
        self.check(peer)?;
        self.verbs_transport()?
            .qp(peer)?
            .connect(remote, &self.core.cfg.connect)?;
        self.core.mark_connected(peer);
        Ok(())
    }

    /// Replaces the connection to `peer` with a fresh queue pair (verbs:
    /// a new QP on the same completion queue, the old one left in the
    /// error state and freed by a later reconnect) and connects it: `exchange` gets the new endpoint,
    /// must hand it to the peer, which renews its side of this connection
    /// the same way, and returns the peer's new endpoint. The other peers'
    /// connections are untouched. Between the renewal and the connect,
    /// posts to `peer` fail with [`TransportError::Broken`].
    ///
    /// For a connection a flush or an error completion left in the error
    /// state. No work is outstanding here: `&mut self` means no scope is
    /// open, and every scope drained its work before it ended.
    #[cfg(feature = "verbs")]
    pub fn reconnect<E: From<TransportError>>(
        &mut self,
        peer: usize,
        exchange: impl FnOnce(Endpoint) -> Result<Endpoint, E>,
    ) -> Result<(), E> {
        let mine = self.renew(peer)?;
        let theirs = exchange(mine)?;
        self.connect(peer, &theirs)?;
        Ok(())
    }

    /// The first half of [`MultiChannel::reconnect`]: a fresh queue pair
    /// for `peer`, not yet connected; returns its endpoint. Finish with
    /// [`MultiChannel::connect`].
    #[cfg(feature = "verbs")]
    pub fn renew(&mut self, peer: usize) -> TransportResult<Endpoint> {
        self.check(peer)?;
        if self.core.shared_pool_flushed() {
            // Its SRQ still holds receives no QP may take: a new QP
            // attached to it would.
            return Err(TransportError::SharedPoolFlushed);
        }
        let verbs = self.verbs_transport()?;
        self.core.mark_broken(peer);
        verbs.renew_qp(peer)
    }

    #[cfg(feature = "verbs")]
    fn verbs_transport(&self) -> TransportResult<&VerbsTransport> {
        self.verbs.as_deref().ok_or_else(|| {
            TransportError::Config(
                "endpoints and connect are verbs operations; this channel runs over another transport"
                    .into(),
            )
        })
    }

    #[cfg(feature = "verbs")]
    fn check(&self, peer: usize) -> TransportResult<()> {
        let count = self.num_channels();
        if peer >= count {
            return Err(TransportError::NoSuchPeer { peer, count });
        }
        Ok(())
    }

    /// The shared protection domain, when the connections are verbs.
    #[cfg(feature = "verbs")]
    pub fn pd(&self) -> Option<&ProtectionDomain> {
        self.verbs.as_ref().map(|v| &v.pd)
    }

    /// A registry for buffers used on this channel.
    pub fn registry(&self) -> &MrRegistry {
        &self.registry
    }

    /// Runs `f` with a [`PollingScope`] over all peers (see
    /// [`Channel::scope`](crate::Channel::scope)).
    pub fn scope<'env, F, T, E>(&'env mut self, f: F) -> Result<T, ScopeError<E>>
    where
        F: for<'scope> FnOnce(&mut PollingScope<'scope, 'env, MultiChannel>) -> Result<T, E>,
    {
        run_scope(&*self, Unpolled::Drain, f)
    }

    /// Like [`MultiChannel::scope`], with unpolled requests reported.
    pub fn manual_scope<'env, F, T, E>(&'env mut self, f: F) -> Result<T, ScopeError<E>>
    where
        F: for<'scope> FnOnce(&mut PollingScope<'scope, 'env, MultiChannel>) -> Result<T, E>,
    {
        run_scope(&*self, Unpolled::Report, f)
    }
}

impl<'scope, 'env, C: MultiPeer + ?Sized> PollingScope<'scope, 'env, C> {
    /// Posts a send to the request's peer.
    pub fn post_send(
        &mut self,
        wr: PeerSendWorkRequest<'_, 'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.send_to(wr.peer, wr.wr)
    }

    /// Posts a receive for a message from the request's peer.
    pub fn post_receive(
        &mut self,
        wr: PeerReceiveWorkRequest<'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.receive_from(wr.peer, wr.wr)
    }

    /// Posts a receive to the channel's shared receive pool
    /// ([`ChannelBuilder::shared_receives`](crate::ChannelBuilder::shared_receives)):
    /// the next message from any peer lands in it, and
    /// [`WorkDone::peer`](crate::WorkDone::peer) names the sender. One
    /// pool of receives serves every peer, instead of a ring per peer.
    pub fn post_receive_any(
        &mut self,
        wr: ReceiveWorkRequest<'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.receive_any(wr)
    }

    /// Receives posted to the shared pool whose message has not been
    /// reported yet.
    pub fn shared_receives_posted(&self) -> usize {
        self.core().shared_posted()
    }

    /// Arms the shared pool's low watermark: once fewer than `limit` of
    /// its receives remain posted (verbs: the SRQ's limit event),
    /// [`shared_limit_reached`](Self::shared_limit_reached) says so, once;
    /// arm it again after refilling.
    pub fn arm_shared_limit(&mut self, limit: u32) -> TransportResult<()> {
        self.core().arm_shared_limit(limit)
    }

    /// Whether the shared pool fell below its armed limit since it was
    /// last armed (checking clears it).
    pub fn shared_limit_reached(&mut self) -> TransportResult<bool> {
        self.core().shared_limit_reached()
    }

    /// Posts an RDMA write to the request's peer.
    pub fn post_write(
        &mut self,
        wr: PeerWriteWorkRequest<'_, 'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.write_to(wr.peer, wr.wr)
    }

    /// Posts an RDMA read from the request's peer.
    pub fn post_read(
        &mut self,
        wr: PeerReadWorkRequest<'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.read_from(wr.peer, wr.wr)
    }

    /// Posts a remote atomic to the request's peer; the completed work
    /// hands back the 8-byte result buffer holding the word's original
    /// value ([`WorkDone::original_value`](crate::WorkDone::original_value)).
    pub fn post_atomic(
        &mut self,
        wr: PeerAtomicWorkRequest<'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.atomic_to(wr.peer, wr.wr)
    }

    /// Posts sends to several peers.
    pub fn post_scatter_send<'wr, I>(
        &mut self,
        wrs: I,
    ) -> TransportResult<Vec<ScopedPendingWork<'scope, 'env>>>
    where
        I: IntoIterator<Item = PeerSendWorkRequest<'wr, 'env>>,
        'env: 'wr,
    {
        wrs.into_iter().map(|wr| self.post_send(wr)).collect()
    }

    /// Posts RDMA writes to several peers.
    pub fn post_scatter_write<'wr, I>(
        &mut self,
        wrs: I,
    ) -> TransportResult<Vec<ScopedPendingWork<'scope, 'env>>>
    where
        I: IntoIterator<Item = PeerWriteWorkRequest<'wr, 'env>>,
        'env: 'wr,
    {
        wrs.into_iter().map(|wr| self.post_write(wr)).collect()
    }

    /// Posts receives from several peers.
    pub fn post_gather_receive<I>(
        &mut self,
        wrs: I,
    ) -> TransportResult<Vec<ScopedPendingWork<'scope, 'env>>>
    where
        I: IntoIterator<Item = PeerReceiveWorkRequest<'env>>,
    {
        wrs.into_iter().map(|wr| self.post_receive(wr)).collect()
    }

    /// Posts RDMA reads from several peers.
    pub fn post_gather_read<I>(
        &mut self,
        wrs: I,
    ) -> TransportResult<Vec<ScopedPendingWork<'scope, 'env>>>
    where
        I: IntoIterator<Item = PeerReadWorkRequest<'env>>,
    {
        wrs.into_iter().map(|wr| self.post_read(wr)).collect()
    }

    /// Posts the same send to several peers.
    pub fn post_multicast_send<'wr, I>(
        &mut self,
        peers: I,
        wr: SendWorkRequest<'wr, 'env>,
    ) -> TransportResult<Vec<ScopedPendingWork<'scope, 'env>>>
    where
        I: IntoIterator<Item = usize>,
        'env: 'wr,
    {
        peers.into_iter().map(|p| self.send_to(p, wr)).collect()
    }

    /// Posts writes to one peer as one list: one doorbell per 16 requests,
    /// and only the last of each 16 signalled (selective signalling). The
    /// handle is the last request's: it completes once all have (if one
    /// fails, the connection breaks and the rest are flushed, so the handle
    /// reports an error, and the scope's drain names the first failure).
    /// Posting allocates nothing.
    pub fn post_write_list(
        &mut self,
        peer: usize,
        wrs: &[crate::WriteWorkRequest<'_, 'env>],
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.list_to(peer, wrs)
    }

    /// Posts sends to one peer as one list (see
    /// [`PollingScope::post_write_list`]).
    pub fn post_send_list(
        &mut self,
        peer: usize,
        wrs: &[SendWorkRequest<'_, 'env>],
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        self.list_to(peer, wrs)
    }

    /// Number of peers.
    pub fn num_channels(&self) -> usize {
        self.core().peers()
    }
}

#[cfg(feature = "verbs")]
impl<'scope, 'env> PollingScope<'scope, 'env, MultiChannel> {
    /// The shared protection domain, when the connections are verbs.
    pub fn pd(&self) -> Option<&ProtectionDomain> {
        self.target.pd()
    }
}
