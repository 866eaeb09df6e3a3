//! `MultiChannel`: one connection per peer over one protection domain.

use std::sync::Arc;

use ferrovia_mr::MrRegistry;

use crate::atomic::PeerAtomicWorkRequest;
use crate::config::ChannelConfig;
use crate::core::ChannelCore;
use crate::error::{ScopeError, TransportError, TransportResult};
use crate::request::{
    PeerReadWorkRequest, PeerReceiveWorkRequest, PeerSendWorkRequest, PeerWriteWorkRequest,
    ReceiveWorkRequest, SendWorkRequest,
};
use crate::scope::{PollingScope, ScopeTarget, ScopedPendingWork, Unpolled, run_scope};
use crate::seam::Transport;

/// A [`ScopeTarget`] with several peers, addressed by index: gives its
/// scopes the `Peer*` posts and the scatter/gather/multicast posts.
/// Implemented by [`MultiChannel`] and by types built on one.
pub trait MultiPeer: ScopeTarget {}

/// One reliable connection per peer sharing one completion stream, over
/// a backend's [`Transport`] ([`MultiChannel::over`]): verbs RC queue
/// pairs in one protection domain (`VerbsBuilder::build_multi` in
/// `ferrovia-verbs-transport`), UCX endpoints, or a test double.
pub struct MultiChannel {
    core: ChannelCore,
    registry: MrRegistry,
}

impl ScopeTarget for MultiChannel {
    fn core(&self) -> &ChannelCore {
        &self.core
    }
}

impl MultiPeer for MultiChannel {}

impl MultiChannel {
    /// A multi-channel over an already connected `transport` whose memory
    /// `registry` registers (UCX, or a test double).
    pub fn over(
        transport: Arc<dyn Transport>,
        registry: MrRegistry,
        cfg: ChannelConfig,
    ) -> MultiChannel {
        MultiChannel {
            core: ChannelCore::new(transport, cfg),
            registry,
        }
    }

    /// The transport underneath, as a `T` when it is one (a backend's
    /// extension methods reach their transport so).
    pub fn transport_as<T: Transport>(&self) -> Option<&T> {
        let t: &dyn Transport = &*self.core.transport;
        (t as &dyn std::any::Any).downcast_ref()
    }

    /// For a backend: connects `peer` through `connect` on the transport,
    /// a `T`, and then takes the peer as connected (posts to it work
    /// again), as [`MultiChannel::connect_renewed`] does through the seam.
    pub fn connect_peer_with<T: Transport, R>(
        &mut self,
        peer: usize,
        connect: impl FnOnce(&T) -> TransportResult<R>,
    ) -> TransportResult<R> {
        let done = connect(self.backend::<T>(peer)?)?;
        self.core.mark_connected(peer);
        Ok(done)
    }

    /// For a backend: takes `peer` as broken (posts to it fail with
    /// [`TransportError::Broken`] until it is connected again) and renews
    /// its connection through `renew` on the transport, a `T`, as
    /// [`MultiChannel::renew`] does through the seam.
    pub fn renew_peer_with<T: Transport, R>(
        &mut self,
        peer: usize,
        renew: impl FnOnce(&T) -> TransportResult<R>,
    ) -> TransportResult<R> {
        let t = self.backend::<T>(peer)?;
        self.core.mark_broken(peer);
        self.core.note_reconnect(peer);
        renew(t)
    }

    /// The transport as a `T`, for `peer`, which must exist.
    fn backend<T: Transport>(&self, peer: usize) -> TransportResult<&T> {
        let count = self.peers();
        if peer >= count {
            return Err(TransportError::NoSuchPeer { peer, count });
        }
        self.transport_as::<T>().ok_or_else(|| {
            TransportError::Config(format!(
                "this channel runs over another transport than {}",
                std::any::type_name::<T>()
            ))
        })
    }

    /// What this channel did, per peer, until now: operations and bytes
    /// by kind, completions by status, flushes, reconnects, revocations,
    /// outstanding requests, sampled latencies (see
    /// [`ChannelStats`](crate::ChannelStats)).
    pub fn stats(&self) -> crate::ChannelStats {
        self.core.stats()
    }

    /// Polls the transport once and routes what arrived to the requests
    /// it completes; returns how many arrived. A backend's extension that
    /// posts work of its own outside a scope (verbs memory windows) turns
    /// the channel with it until that work completes.
    pub fn progress(&self) -> TransportResult<usize> {
        self.core.progress()
    }

    /// Whether a drain deadline flushed the shared receive pool: it then
    /// takes no more receives, and a backend renews no connection that
    /// would draw from it.
    pub fn shared_pool_flushed(&self) -> bool {
        self.core.shared_pool_flushed()
    }

    /// Replaces the connection to `peer` through the transport
    /// ([`Transport::renew`]: a new UCX endpoint, or a fresh verbs queue
    /// pair whose endpoint the bytes encode), for any transport, those
    /// connected outside the channel included; returns what the peer's
    /// renewed side needs (hand it to its
    /// [`MultiChannel::connect_renewed`]). Posts to `peer` fail with
    /// [`TransportError::Broken`] until then. A verbs channel may also use
    /// `VerbsMultiChannel::reconnect`, which speaks in endpoints.
    pub fn renew(&mut self, peer: usize) -> TransportResult<Vec<u8>> {
        let count = self.peers();
        if peer >= count {
            return Err(TransportError::NoSuchPeer { peer, count });
        }
        self.core.mark_broken(peer);
        self.core.note_reconnect(peer);
        self.core.transport.renew(peer)
    }

    /// The second half of [`MultiChannel::renew`]: connects the
    /// renewed side to the peer's, `theirs`; posts to `peer` work again.
    pub fn connect_renewed(&mut self, peer: usize, theirs: &[u8]) -> TransportResult<()> {
        self.core.transport.connect_renewed(peer, theirs)?;
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
    pub fn peers(&self) -> usize {
        self.core.peers()
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
    pub fn peers(&self) -> usize {
        self.core().peers()
    }
}
