//! What a node did with each rank: [`Node::stats`], and with the
//! `metrics` feature [`Node::publish_metrics`].

use ferrovia_channel::ChannelStats;

use crate::node::Node;

impl Node {
    /// What this rank did with each rank (index = rank; its own is the
    /// loopback connection) until now: operations and bytes by kind,
    /// completions by status, flushes, reconnects, revocations,
    /// outstanding requests and sampled latencies (see [`ChannelStats`]).
    /// A rail's are [`Rail`](crate::Rail)'s channel's own.
    pub fn stats(&self) -> ChannelStats {
        self.multi.stats()
    }

    /// Publishes [`Node::stats`] through the `metrics` facade, labelled
    /// with this rank (`rank`) and each peer's (`peer`): see
    /// [`ChannelStats::publish`] for the names. Call it whenever the
    /// exporter should see fresh numbers (counters are set to their
    /// totals, so calling it often costs nothing but the snapshot).
    #[cfg(feature = "metrics")]
    pub fn publish_metrics(&self) {
        self.stats().publish(&[("rank", self.rank.to_string())]);
    }
}
