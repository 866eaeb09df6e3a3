//! `Channel`: one reliable connection with scoped posting.

use std::time::Duration;

use ferrovia_mr::{MrRegistry, RemoteMemoryRegion};
use ferrovia_verbs::{ConnectOptions, Context, Endpoint, ProtectionDomain, QpCaps};

use crate::config::ChannelConfig;
use crate::core::ChannelCore;
use crate::element::{Gather, Scatter};
use crate::error::{ScopeError, TransportError, TransportResult};
use crate::multi::MultiChannel;
use crate::request::{ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest, WriteWorkRequest};
use crate::scope::{PollingScope, ScopeTarget, ScopedPendingWork, run_scope};

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

/// Builds a [`Channel`] or a [`MultiChannel`](crate::MultiChannel).
#[derive(Debug, Clone, Default)]
pub struct ChannelBuilder {
    pub(crate) cfg: ChannelConfig,
    pub(crate) pd: Option<ProtectionDomain>,
}

impl ChannelBuilder {
    /// The RDMA device to open (default: `FERROVIA_DEVICE`, else the first
    /// with an active port).
    pub fn device(mut self, name: impl Into<String>) -> Self {
        self.cfg.device = Some(name.into());
        self
    }

    /// The port (default: the first active one).
    pub fn port(mut self, port: u8) -> Self {
        self.cfg.port = Some(port);
        self
    }

    /// Use this protection domain (and its device) instead of opening one.
    pub fn pd(mut self, pd: &ProtectionDomain) -> Self {
        self.pd = Some(pd.clone());
        self
    }

    /// Queue sizes per peer.
    pub fn caps(mut self, caps: QpCaps) -> Self {
        self.cfg.caps = caps;
        self
    }

    /// Send-queue depth per peer (default 256).
    pub fn send_depth(mut self, depth: u32) -> Self {
        self.cfg.caps.max_send_wr = depth;
        self
    }

    /// Receive-queue depth per peer (default 256).
    pub fn recv_depth(mut self, depth: u32) -> Self {
        self.cfg.caps.max_recv_wr = depth;
        self
    }

    /// Largest payload sent inline (default 64 bytes).
    pub fn max_inline(mut self, bytes: u32) -> Self {
        self.cfg.caps.max_inline_data = bytes;
        self
    }

    /// Transport parameters: MTU, retries, RNR and ACK timeouts.
    pub fn connect_options(mut self, opts: ConnectOptions) -> Self {
        self.cfg.connect = opts;
        self
    }

    /// How long a scope's end waits before flushing (default 10 s).
    pub fn drain_deadline(mut self, d: Duration) -> Self {
        self.cfg.drain_deadline = d;
        self
    }

    /// How long blocking calls wait (default 30 s).
    pub fn op_timeout(mut self, d: Duration) -> Self {
        self.cfg.op_timeout = d;
        self
    }

    /// The configuration built so far.
    pub fn config(&self) -> &ChannelConfig {
        &self.cfg
    }

    pub(crate) fn open_pd(&self) -> TransportResult<ProtectionDomain> {
        if let Some(pd) = &self.pd {
            return Ok(pd.clone());
        }
        let ctx = match &self.cfg.device {
            Some(name) => Context::open(name)?,
            None => Context::open_default()?,
        };
        Ok(ProtectionDomain::new(&ctx)?)
    }

    pub(crate) fn validate(&self) -> TransportResult<()> {
        let c = &self.cfg.caps;
        if c.max_send_wr == 0 || c.max_recv_wr == 0 {
            return Err(TransportError::Config(
                "queue depths must be at least 1".into(),
            ));
        }
        if c.max_send_sge == 0 || c.max_recv_sge == 0 {
            return Err(TransportError::Config(
                "SGE counts must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// Creates the channel's queue pair; connect it with
    /// [`Channel::connect`].
    pub fn build(self) -> TransportResult<Channel> {
        let multi = self.build_multi(1)?;
        let verbs = multi
            .verbs()
            .cloned()
            .ok_or_else(|| TransportError::Config("a channel is built on verbs".into()))?;
        Ok(Channel { multi, verbs })
    }
}

impl ScopeTarget for Channel {
    fn core(&self) -> &ChannelCore {
        self.multi.core()
    }
}

impl Channel {
    /// A builder with defaults suited to most fabrics.
    pub fn builder() -> ChannelBuilder {
        ChannelBuilder::default()
    }

    /// What the peer needs to connect to this channel.
    pub fn endpoint(&self) -> Endpoint {
        self.verbs.endpoint(0)
    }

    /// Connects to the peer's endpoint (INIT → RTR → RTS).
    pub fn connect(&mut self, remote: &Endpoint) -> TransportResult<()> {
        self.multi.connect(0, remote)
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
        run_scope(&*self, false, f)
    }

    /// Like [`Channel::scope`], but the closure is expected to poll every
    /// request it posts: any it leaves are still drained (for safety) and
    /// then reported in the drain error's `unpolled` count.
    pub fn manual_scope<'env, F, T, E>(&'env mut self, f: F) -> Result<T, ScopeError<E>>
    where
        F: for<'scope> FnOnce(&mut PollingScope<'scope, 'env, Channel>) -> Result<T, E>,
    {
        run_scope(&*self, true, f)
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
