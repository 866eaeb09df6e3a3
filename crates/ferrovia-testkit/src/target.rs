//! `Target`: a scope target over a bare `ChannelCore`, so the scoped API
//! runs over any transport double without a `Channel` or `MultiChannel`.

use std::sync::Arc;

use ferrovia_channel::engine::ChannelCore;
use ferrovia_channel::transport::Transport;
use ferrovia_channel::{ChannelConfig, MultiPeer, ScopeTarget};

/// A scope target over one engine.
pub struct Target(pub ChannelCore);

impl ScopeTarget for Target {
    fn core(&self) -> &ChannelCore {
        &self.0
    }
}

impl MultiPeer for Target {}

/// A scope target over `transport` with `cfg`.
pub fn target<T: Transport + 'static>(transport: &Arc<T>, cfg: ChannelConfig) -> Target {
    Target(ChannelCore::new(transport.clone(), cfg))
}
