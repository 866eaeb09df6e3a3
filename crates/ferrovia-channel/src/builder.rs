//! `ChannelBuilder`: the settings every channel has, whatever its
//! backend: depths, timeouts, the shared receive pool.

use std::time::Duration;

use crate::config::ChannelConfig;

/// The settings of a [`Channel`](crate::Channel) or a
/// [`MultiChannel`](crate::MultiChannel) ([`ChannelBuilder::config`]),
/// for a backend's builder to build it with (`VerbsBuilder::channel` in
/// `ferrovia-verbs-transport`; UCX's callers hand
/// the config to [`MultiChannel::over`](crate::MultiChannel::over)).
#[derive(Debug, Clone, Default)]
pub struct ChannelBuilder {
    cfg: ChannelConfig,
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

    /// Sends outstanding per peer (default 256).
    pub fn send_depth(mut self, depth: u32) -> Self {
        self.cfg.send_depth = depth;
        self
    }

    /// Receives posted per peer (default 256).
    pub fn recv_depth(mut self, depth: u32) -> Self {
        self.cfg.recv_depth = depth;
        self
    }

    /// The configuration built so far.
    pub fn config(&self) -> &ChannelConfig {
        &self.cfg
    }
}
