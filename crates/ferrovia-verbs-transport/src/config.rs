//! `VerbsConfig`: the settings only verbs has (device, port, scatter/gather
//! and inline limits, connection parameters); the channel's own
//! (`ChannelConfig`: depths, timeouts, the shared pool) apply to every
//! backend.

use ferrovia_channel::ChannelConfig;
use ferrovia_verbs::{ConnectOptions, QpCaps};

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
