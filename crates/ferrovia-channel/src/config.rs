//! Channel configuration with sane defaults.

use std::time::Duration;

#[cfg(feature = "verbs")]
use ferrovia_verbs::{ConnectOptions, QpCaps};

/// How a channel is built and how long it waits. The device, queue and
/// connection settings exist with the `verbs` feature.
///
/// Non-exhaustive, so that a dependency turning `verbs` on elsewhere in
/// the build cannot break a struct literal: start from
/// `ChannelConfig::default()` and set fields, or use [`ChannelBuilder`]
/// (`ChannelBuilder::config` reads the result).
///
/// [`ChannelBuilder`]: crate::ChannelBuilder
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ChannelConfig {
    /// Device name; `None` takes `FERROVIA_DEVICE` or the first device
    /// with an active port.
    #[cfg(feature = "verbs")]
    pub device: Option<String>,
    /// Port; `None` takes the first active one.
    #[cfg(feature = "verbs")]
    pub port: Option<u8>,
    /// Queue sizes per peer (default 256 sends, 256 receives, 4 SGEs, 64
    /// inline bytes).
    #[cfg(feature = "verbs")]
    pub caps: QpCaps,
    /// Transport parameters of the connections.
    #[cfg(feature = "verbs")]
    pub connect: ConnectOptions,
    /// Receives in the channel's shared receive pool (default 0: none;
    /// each peer has its own receive queue). With a pool, every message
    /// from any peer lands in a receive posted with `post_receive_any`.
    pub shared_receives: u32,
    /// How long a scope waits for outstanding work at its end before it
    /// flushes it (default 10 s).
    pub drain_deadline: Duration,
    /// How long the blocking calls and `spin_poll` wait (default 30 s).
    pub op_timeout: Duration,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig {
            #[cfg(feature = "verbs")]
            device: None,
            #[cfg(feature = "verbs")]
            port: None,
            #[cfg(feature = "verbs")]
            caps: QpCaps::default(),
            #[cfg(feature = "verbs")]
            connect: ConnectOptions::default(),
            shared_receives: 0,
            drain_deadline: Duration::from_secs(10),
            op_timeout: Duration::from_secs(30),
        }
    }
}
