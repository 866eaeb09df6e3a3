//! [`VerbsBuilder`]: opens a device (or takes a protection domain) and
//! builds a verbs transport, a `MultiChannel` or a `Channel` on it.

use std::sync::Arc;
use std::time::Duration;

use ferrovia_channel::{
    Channel, ChannelBuilder, ChannelConfig, MultiChannel, TransportError, TransportResult,
};
use ferrovia_verbs::{ConnectOptions, Context, ProtectionDomain, QpCaps};

use crate::config::VerbsConfig;
use crate::error::from_verbs;
use crate::registrar::registry;
use crate::transport::VerbsTransport;

/// Builds verbs channels: the channel's settings (depths, timeouts, the
/// shared pool: a [`ChannelBuilder`]) and the verbs ones.
#[derive(Debug, Clone, Default)]
pub struct VerbsBuilder {
    channel: ChannelBuilder,
    verbs: VerbsConfig,
    pd: Option<ProtectionDomain>,
}

// The transport's constructor lives with its builder, as UCX's does.
impl VerbsTransport {
    /// A builder.
    pub fn builder() -> VerbsBuilder {
        VerbsBuilder::default()
    }
}

impl VerbsBuilder {
    /// The channel settings every backend has (replaces those set so far
    /// through this builder's own setters for them).
    pub fn channel(mut self, channel: ChannelBuilder) -> Self {
        self.channel = channel;
        self
    }

    /// How long a scope's end waits before flushing (default 10 s).
    pub fn drain_deadline(self, d: Duration) -> Self {
        self.map_channel(|c| c.drain_deadline(d))
    }

    /// How long blocking calls wait (default 30 s).
    pub fn op_timeout(self, d: Duration) -> Self {
        self.map_channel(|c| c.op_timeout(d))
    }

    /// A shared receive pool of `n` receives (a shared receive queue);
    /// see [`ChannelBuilder::shared_receives`].
    pub fn shared_receives(self, n: u32) -> Self {
        self.map_channel(|c| c.shared_receives(n))
    }

    /// Send-queue depth per peer (default 256).
    pub fn send_depth(self, depth: u32) -> Self {
        self.map_channel(|c| c.send_depth(depth))
    }

    /// Receive-queue depth per peer (default 256).
    pub fn recv_depth(self, depth: u32) -> Self {
        self.map_channel(|c| c.recv_depth(depth))
    }

    fn map_channel(mut self, f: impl FnOnce(ChannelBuilder) -> ChannelBuilder) -> Self {
        self.channel = f(self.channel);
        self
    }

    /// The RDMA device to open (default: `FERROVIA_DEVICE`, else the first
    /// with an active port).
    pub fn device(mut self, name: impl Into<String>) -> Self {
        self.verbs.device = Some(name.into());
        self
    }

    /// The port (default: the first active one).
    pub fn port(mut self, port: u8) -> Self {
        self.verbs.port = Some(port);
        self
    }

    /// Use this protection domain (and its device) instead of opening one.
    pub fn pd(mut self, pd: &ProtectionDomain) -> Self {
        self.pd = Some(pd.clone());
        self
    }

    /// The protection domain given with [`VerbsBuilder::pd`] or opened by
    /// [`VerbsBuilder::open_device`], if any.
    pub fn protection_domain(&self) -> Option<&ProtectionDomain> {
        self.pd.as_ref()
    }

    /// Queue sizes per peer: the depths (the channel's) and the limits.
    pub fn caps(self, caps: QpCaps) -> Self {
        let mut b = self
            .send_depth(caps.max_send_wr)
            .recv_depth(caps.max_recv_wr);
        b.verbs.max_send_sge = caps.max_send_sge;
        b.verbs.max_recv_sge = caps.max_recv_sge;
        b.verbs.max_inline = caps.max_inline_data;
        b
    }

    /// Largest payload sent inline (default 64 bytes).
    pub fn max_inline(mut self, bytes: u32) -> Self {
        self.verbs.max_inline = bytes;
        self
    }

    /// Transport parameters: MTU, retries, RNR and ACK timeouts.
    pub fn connect_options(mut self, opts: ConnectOptions) -> Self {
        self.verbs.connect = opts;
        self
    }

    /// Takes these verbs settings (replacing those set so far).
    pub fn with_config(mut self, verbs: VerbsConfig) -> Self {
        self.verbs = verbs;
        self
    }

    /// The verbs settings so far.
    pub fn config(&self) -> &VerbsConfig {
        &self.verbs
    }

    /// The channel settings so far.
    pub fn channel_config(&self) -> &ChannelConfig {
        self.channel.config()
    }

    /// Opens the device's protection domain now, unless one was given:
    /// for a caller that must know whether verbs works here before it
    /// builds (a node picking its backend).
    pub fn open_device(mut self) -> TransportResult<Self> {
        self.pd = Some(self.pd_or_open()?);
        Ok(self)
    }

    fn pd_or_open(&self) -> TransportResult<ProtectionDomain> {
        if let Some(pd) = &self.pd {
            return Ok(pd.clone());
        }
        let ctx = match &self.verbs.device {
            Some(name) => Context::open(name),
            None => Context::open_default(),
        }
        .map_err(from_verbs)?;
        ProtectionDomain::new(&ctx).map_err(from_verbs)
    }

    fn validate(&self) -> TransportResult<()> {
        let (c, v) = (self.channel.config(), &self.verbs);
        if c.send_depth == 0 || c.recv_depth == 0 {
            return Err(TransportError::Config(
                "queue depths must be at least 1".into(),
            ));
        }
        if v.max_send_sge == 0 || v.max_recv_sge == 0 {
            return Err(TransportError::Config(
                "SGE counts must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// A transport of `peers` queue pairs, not connected.
    pub fn build_transport(self, peers: usize) -> TransportResult<VerbsTransport> {
        self.validate()?;
        let pd = self.pd_or_open()?;
        VerbsTransport::new(&pd, peers, self.channel.config(), &self.verbs)
    }

    /// A [`MultiChannel`] with `peers` queue pairs; connect each with
    /// [`VerbsMultiChannel::connect`](crate::VerbsMultiChannel::connect).
    pub fn build_multi(self, peers: usize) -> TransportResult<MultiChannel> {
        let cfg = self.channel.config().clone();
        let transport = self.build_transport(peers)?;
        let registry = registry(transport.pd());
        Ok(MultiChannel::over(Arc::new(transport), registry, cfg))
    }

    /// A [`Channel`] with one queue pair; connect it with
    /// [`VerbsChannel::connect`](crate::VerbsChannel::connect).
    pub fn build(self) -> TransportResult<Channel> {
        Channel::from_multi(self.build_multi(1)?)
    }
}
