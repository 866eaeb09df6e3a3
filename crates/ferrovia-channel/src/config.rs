//! Channel configuration with sane defaults.

use std::time::Duration;

/// How a channel is built and how long it waits, whatever its backend
/// (a backend's own settings, such as the verbs device, are the
/// backend's).
///
/// Non-exhaustive, so that a field added later breaks no struct literal:
/// start from `ChannelConfig::default()` and set fields, or use
/// [`ChannelBuilder`] (`ChannelBuilder::config` reads the result).
///
/// [`ChannelBuilder`]: crate::ChannelBuilder
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ChannelConfig {
    /// Sends outstanding per peer (default 256): the send queue's depth
    /// on verbs, the operations in flight per peer on UCX.
    pub send_depth: u32,
    /// Receives posted per peer (default 256).
    pub recv_depth: u32,
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
            send_depth: 256,
            recv_depth: 256,
            shared_receives: 0,
            drain_deadline: Duration::from_secs(10),
            op_timeout: Duration::from_secs(30),
        }
    }
}
