//! `MultiChannel`: one connection per peer over one protection domain.

use std::sync::Arc;

use ferrovia_mr::MrRegistry;
use ferrovia_verbs::{Endpoint, ProtectionDomain};

use crate::channel::ChannelBuilder;
use crate::core::{ChannelCore, SendSpec};
use crate::error::{ScopeError, TransportError, TransportResult};
use crate::request::{
    PeerReadWorkRequest, PeerReceiveWorkRequest, PeerSendWorkRequest, PeerWriteWorkRequest,
    SendWorkRequest,
};
use crate::scope::{PollingScope, ScopeTarget, ScopedPendingWork, run_scope};
use crate::verbs_transport::VerbsTransport;

/// A [`ScopeTarget`] with several peers, addressed by index: gives its
/// scopes the `Peer*` posts and the scatter/gather/multicast posts.
/// Implemented by [`MultiChannel`] and by types built on one.
pub trait MultiPeer: ScopeTarget {}

/// One RC connection per peer, all in one protection domain and sharing
/// one completion queue.
pub struct MultiChannel {
    core: ChannelCore,
    verbs: Arc<VerbsTransport>,
    registry: MrRegistry,
}

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
            verbs,
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

    /// Number of peers (queue pairs).
    pub fn num_channels(&self) -> usize {
        self.verbs.qps.len()
    }

    /// What peer `peer` needs to connect its side to us.
    pub fn endpoint(&self, peer: usize) -> TransportResult<Endpoint> {
        self.check(peer)?;
        Ok(self.verbs.endpoint(peer))
    }

    /// Connects the queue pair of `peer` to its endpoint.
    pub fn connect(&mut self, peer: usize, remote: &Endpoint) -> TransportResult<()> {
        self.check(peer)?;
        self.verbs.qps[peer].connect(remote, &self.core.cfg.connect)?;
        self.core.mark_connected(peer);
        Ok(())
    }

    pub(crate) fn verbs(&self) -> &VerbsTransport {
        &self.verbs
    }

    fn check(&self, peer: usize) -> TransportResult<()> {
        let count = self.num_channels();
        if peer >= count {
            return Err(TransportError::NoSuchPeer { peer, count });
        }
        Ok(())
    }

    /// The shared protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.verbs.pd
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
        run_scope(&*self, false, f)
    }

    /// Like [`MultiChannel::scope`], with unpolled requests reported.
    pub fn manual_scope<'env, F, T, E>(&'env mut self, f: F) -> Result<T, ScopeError<E>>
    where
        F: for<'scope> FnOnce(&mut PollingScope<'scope, 'env, MultiChannel>) -> Result<T, E>,
    {
        run_scope(&*self, true, f)
    }
}

impl<'scope, 'env, C: MultiPeer + ?Sized> PollingScope<'scope, 'env, C> {
    /// Posts a send to the request's peer.
    pub fn post_send(
        &mut self,
        wr: PeerSendWorkRequest<'_, 'env>,
    ) -> TransportResult<ScopedPendingWork<'scope>> {
        self.send_to(wr.peer, wr.wr)
    }

    /// Posts a receive for a message from the request's peer.
    pub fn post_receive(
        &mut self,
        wr: PeerReceiveWorkRequest<'env>,
    ) -> TransportResult<ScopedPendingWork<'scope>> {
        self.receive_from(wr.peer, wr.wr)
    }

    /// Posts an RDMA write to the request's peer.
    pub fn post_write(
        &mut self,
        wr: PeerWriteWorkRequest<'_, 'env>,
    ) -> TransportResult<ScopedPendingWork<'scope>> {
        self.write_to(wr.peer, wr.wr)
    }

    /// Posts an RDMA read from the request's peer.
    pub fn post_read(
        &mut self,
        wr: PeerReadWorkRequest<'env>,
    ) -> TransportResult<ScopedPendingWork<'scope>> {
        self.read_from(wr.peer, wr.wr)
    }

    /// Posts sends to several peers.
    pub fn post_scatter_send<'wr, I>(
        &mut self,
        wrs: I,
    ) -> TransportResult<Vec<ScopedPendingWork<'scope>>>
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
    ) -> TransportResult<Vec<ScopedPendingWork<'scope>>>
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
    ) -> TransportResult<Vec<ScopedPendingWork<'scope>>>
    where
        I: IntoIterator<Item = PeerReceiveWorkRequest<'env>>,
    {
        wrs.into_iter().map(|wr| self.post_receive(wr)).collect()
    }

    /// Posts RDMA reads from several peers.
    pub fn post_gather_read<I>(&mut self, wrs: I) -> TransportResult<Vec<ScopedPendingWork<'scope>>>
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
    ) -> TransportResult<Vec<ScopedPendingWork<'scope>>>
    where
        I: IntoIterator<Item = usize>,
        'env: 'wr,
    {
        peers.into_iter().map(|p| self.send_to(p, wr)).collect()
    }

    /// Posts writes to one peer as one list: one doorbell per 16, only the
    /// last signalled.
    pub fn post_write_list(
        &mut self,
        peer: usize,
        wrs: &[crate::WriteWorkRequest<'_, 'env>],
    ) -> TransportResult<Vec<ScopedPendingWork<'scope>>> {
        let specs: Vec<SendSpec<'_, 'env>> = wrs.iter().map(SendSpec::write).collect();
        self.list_to(peer, &specs)
    }

    /// Number of peers.
    pub fn num_channels(&self) -> usize {
        self.core().peers()
    }
}

impl<'scope, 'env> PollingScope<'scope, 'env, MultiChannel> {
    /// The shared protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        self.target.pd()
    }
}
