//! `Channel`: one reliable connection with scoped posting.

use ferrovia_mr::{MrRegistry, RemoteMemoryRegion};
use ferrovia_verbs::{Endpoint, ProtectionDomain};

use crate::atomic::AtomicWorkRequest;
use crate::builder::ChannelBuilder;
use crate::core::ChannelCore;
use crate::element::{Gather, Scatter};
use crate::error::{ScopeError, TransportError, TransportResult};
use crate::multi::MultiChannel;
use crate::request::{ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest, WriteWorkRequest};
use crate::scope::{PollingScope, ScopeTarget, ScopedPendingWork, Unpolled, run_scope};

/// One RC connection to one peer, with scoped posting.
///
/// ```no_run
/// use ferrovia_channel::{Channel, Gather, SendWorkRequest};
/// use ferrovia_mr::RegisterOptions;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut ch = Channel::builder().build()?;
/// # let peer_endpoint = ch.endpoint();
/// ch.connect(&peer_endpoint)?; // exchanged out of band
/// let msg = ch.registry().register_buffer(b"hello".to_vec(), RegisterOptions::local())?;
/// ch.scope(|s| {
///     let g = [Gather::of(&msg)?];
///     let sent = s.post_send(SendWorkRequest::new(&g)?)?;
///     sent.wait(std::time::Duration::from_secs(5))?;
///     Ok::<_, ferrovia_channel::TransportError>(())
/// })?;
/// # Ok(())
/// # }
/// ```
pub struct Channel {
    /// A channel is a multi-channel of one peer with a single-peer API.
    multi: MultiChannel,
    verbs: std::sync::Arc<crate::verbs_transport::VerbsTransport>,
}

impl ScopeTarget for Channel {
    fn core(&self) -> &ChannelCore {
        self.multi.core()
    }
}

impl Channel {
    pub(crate) fn from_parts(
        multi: MultiChannel,
        verbs: std::sync::Arc<crate::verbs_transport::VerbsTransport>,
    ) -> Channel {
        Channel { multi, verbs }
    }

    /// A builder with defaults suited to most fabrics.
    pub fn builder() -> ChannelBuilder {
        ChannelBuilder::default()
    }

    /// What the peer needs to connect to this channel.
    pub fn endpoint(&self) -> Endpoint {
        self.verbs.qps.first().endpoint()
    }

    /// Connects to the peer's endpoint (INIT → RTR → RTS).
    pub fn connect(&mut self, remote: &Endpoint) -> TransportResult<()> {
        self.multi.connect(0, remote)
    }

    /// Replaces the connection (after a flush or an error completion left
    /// it in the error state) with a fresh queue pair: `exchange` gets its
    /// endpoint, must hand it to the peer (which renews its side too) and
    /// return the peer's new endpoint (see [`MultiChannel::reconnect`]).
    pub fn reconnect<E: From<TransportError>>(
        &mut self,
        exchange: impl FnOnce(Endpoint) -> Result<Endpoint, E>,
    ) -> Result<(), E> {
        self.multi.reconnect(0, exchange)
    }

    /// The first half of [`Channel::reconnect`]: a fresh queue pair, not
    /// yet connected; returns its endpoint. Finish with
    /// [`Channel::connect`].
    pub fn renew(&mut self) -> TransportResult<Endpoint> {
        self.multi.renew(0)
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.verbs.pd
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

    /// The channel's protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        self.target.pd()
    }
}
