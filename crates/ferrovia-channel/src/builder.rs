//! `ChannelBuilder`: what a channel is built with. The timing settings
//! apply to every transport; the device, queue and connection settings to
//! verbs (feature `verbs`).

use std::time::Duration;

use crate::config::ChannelConfig;
#[cfg(feature = "verbs")]
use crate::error::{TransportError, TransportResult};
#[cfg(feature = "verbs")]
use ferrovia_verbs::{ConnectOptions, Context, ProtectionDomain, QpCaps};

/// Builds a [`Channel`](crate::Channel) or a
/// [`MultiChannel`](crate::MultiChannel), and carries the settings of a
/// multi-channel over another transport ([`ChannelBuilder::config`]).
#[derive(Debug, Clone, Default)]
pub struct ChannelBuilder {
    pub(crate) cfg: ChannelConfig,
    #[cfg(feature = "verbs")]
    pub(crate) pd: Option<ProtectionDomain>,
}

impl ChannelBuilder {
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

    /// Gives the channel one pool of `n` receives that every peer's
    /// messages land in (a shared receive queue on verbs), posted with
    /// [`post_receive_any`](crate::PollingScope::post_receive_any), instead
    /// of a receive queue per peer: memory grows with the pool, not with
    /// the number of peers. 0 (the default) keeps per-peer receives.
    pub fn shared_receives(mut self, n: u32) -> Self {
        self.cfg.shared_receives = n;
        self
    }

    /// The configuration built so far.
    pub fn config(&self) -> &ChannelConfig {
        &self.cfg
    }
}

#[cfg(feature = "verbs")]
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

    /// The protection domain given with [`ChannelBuilder::pd`], if any.
    pub fn protection_domain(&self) -> Option<&ProtectionDomain> {
        self.pd.as_ref()
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
    /// [`Channel::connect`](crate::Channel::connect).
    pub fn build(self) -> TransportResult<crate::Channel> {
        crate::Channel::from_multi(self.build_multi(1)?)
    }
}
