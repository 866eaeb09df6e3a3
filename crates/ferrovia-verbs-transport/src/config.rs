//! `VerbsConfig`: the settings only verbs has (device, port, scatter/gather
//! and inline limits, connection parameters); the channel's own
//! (`ChannelConfig`: depths, timeouts, the shared pool) apply to every
//! backend.

use ferrovia_channel::ChannelConfig;
use ferrovia_verbs::{ConnectOptions, PollPath, PostPath, QpCaps};

/// The verbs settings of a transport. Non-exhaustive: start from
/// `VerbsConfig::default()` and set fields, or use
/// [`VerbsBuilder`](crate::VerbsBuilder).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct VerbsConfig {
    /// Device name; `None` takes `FERROVIA_DEVICE` or the first device
    /// with an active port.
    pub device: Option<String>,
    /// Port; `None` takes the first active one.
    pub port: Option<u8>,
    /// Scatter/gather elements per send (default 4).
    pub max_send_sge: u32,
    /// Scatter/gather elements per receive (default 4).
    pub max_recv_sge: u32,
    /// Largest payload sent inline (default 64 bytes).
    pub max_inline: u32,
    /// Transport parameters of the connections.
    pub connect: ConnectOptions,
    /// How posts reach the send queues (default [`PostPath::Auto`]:
    /// `ibv_wr_*` where the provider offers it, else `ibv_post_send`).
    pub post_path: PostPath,
    /// How the completion queue is polled (default [`PollPath::Auto`]:
    /// `ibv_start_poll` where the provider offers it, else `ibv_poll_cq`).
    pub poll_path: PollPath,
}

impl Default for VerbsConfig {
    fn default() -> Self {
        let caps = QpCaps::default();
        VerbsConfig {
            device: None,
            port: None,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge,
            max_inline: caps.max_inline_data,
            connect: ConnectOptions::default(),
            post_path: PostPath::Auto,
            poll_path: PollPath::Auto,
        }
    }
}

impl VerbsConfig {
    /// The queue pair caps: `channel`'s depths with these limits.
    pub fn caps(&self, channel: &ChannelConfig) -> QpCaps {
        QpCaps::default()
            .max_send_wr(channel.send_depth)
            .max_recv_wr(channel.recv_depth)
            .max_send_sge(self.max_send_sge)
            .max_recv_sge(self.max_recv_sge)
            .max_inline_data(self.max_inline)
    }
}
