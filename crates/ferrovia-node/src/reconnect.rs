//! Replacing one connection of a pair of ranks: the node's own
//! ([`Node::reconnect`]) or another the program keeps, a rail's above all
//! ([`Node::reconnect_with`]). Both make the same two-sided agreement over
//! the control path (`control`); a link number tells the pair's
//! connections apart, and each (link, peer) counts its own generations.

use std::time::Duration;

use crate::error::{BootstrapError, NodeError};
use crate::node::Node;

impl Node {
    /// Replaces the connection to `peer` with a fresh one (verbs: a new
    /// queue pair; UCX: a new endpoint), for a connection a drain deadline
    /// or an error completion left in the error state. `peer` must call
    /// `reconnect` with this rank too, within `timeout`: the two agree over
    /// a TCP control path each rank opened at bootstrap (the lower rank
    /// dials the higher one's control port and shows the job token), trade
    /// their renewed sides, and both are connected when either returns.
    /// Other ranks are not disturbed. A peer that never comes (dead, or
    /// not reconnecting) fails it within `timeout`, naming the peer.
    ///
    /// This is [`Node::reconnect_with`] for link 0, the node's own
    /// connections, with the node's own renewal.
    pub fn reconnect(&mut self, peer: usize, timeout: Duration) -> Result<(), NodeError> {
        let mut side = (&mut self.multi, &self.renewer);
        self.control.agree(
            self.rank,
            0,
            peer,
            timeout,
            &mut side,
            |(multi, renewer)| renewer.renew(multi, peer),
            |(multi, renewer), theirs| renewer.connect(multi, peer, &theirs),
        )
    }

    /// Replaces another connection of this rank's with `peer` than the
    /// node's own, one the program keeps (a [`Rail`](crate::Rail)'s
    /// above all), with the same agreement [`Node::reconnect`] makes:
    /// `renew` replaces this side and returns what the peer's renewed side
    /// needs; the two ranks trade those bytes over the control path (the
    /// lower rank dials, shows the job token and the connection's
    /// generation); then `connect` gets the peer's bytes and connects this
    /// side to them. Both sides are connected when either returns.
    ///
    /// `link` names the connection: a rail's is its id + 1 (0 is the
    /// node's own, refused here: [`BootstrapError::ReservedLink`]). Both
    /// ranks call it with the same link and each other as `peer`, within
    /// `timeout`; a call for another link meets
    /// [`BootstrapError::ReconnectLinkMismatch`] on both sides, never the
    /// peer's other connection. Each (link, peer) counts its generations
    /// as `Node::reconnect` counts the node's
    /// ([`Node::link_generation`]). Nothing else of the job is disturbed:
    /// the node's own connections, the other links, the other ranks.
    ///
    /// The closures typically renew and connect one peer of a
    /// [`MultiChannel`](ferrovia_channel::MultiChannel) over the rail's
    /// transport; both need it mutably, one after the other:
    ///
    /// ```no_run
    /// use std::cell::RefCell;
    /// use std::time::Duration;
    /// use ferrovia_channel::{ChannelConfig, MultiChannel};
    /// use ferrovia_node::{Node, NodeError, RailSpec};
    ///
    /// # fn main() -> Result<(), NodeError> {
    /// let mut node = Node::from_env()?;
    /// let rail = node.open_rail(1, RailSpec::Same, Duration::from_secs(30))?;
    /// let (transport, registry) = rail.into_parts();
    /// let mut channel = MultiChannel::over(transport, registry, ChannelConfig::default());
    /// // ... a drain deadline flushed the connection to rank 1 ...
    /// let ch = RefCell::new(&mut channel);
    /// node.reconnect_with(
    ///     1 + 1, // rail 1's link
    ///     1,
    ///     Duration::from_secs(10),
    ///     || Ok(ch.borrow_mut().renew(1)?),
    ///     |theirs| Ok(ch.borrow_mut().connect_renewed(1, &theirs)?),
    /// )?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn reconnect_with(
        &mut self,
        link: u32,
        peer: usize,
        timeout: Duration,
        renew: impl FnOnce() -> Result<Vec<u8>, NodeError>,
        connect: impl FnOnce(Vec<u8>) -> Result<(), NodeError>,
    ) -> Result<(), NodeError> {
        if link == 0 {
            return Err(NodeError::Reconnect {
                peer,
                link,
                after: Duration::ZERO,
                source: Box::new(BootstrapError::ReservedLink.into()),
            });
        }
        self.control.agree(
            self.rank,
            link,
            peer,
            timeout,
            &mut (),
            |()| renew(),
            |(), theirs| connect(theirs),
        )
    }

    /// How many reconnects with `peer` succeeded: the generation of the
    /// connection to it (0 for one made at bootstrap).
    pub fn connection_generation(&self, peer: usize) -> Option<u32> {
        self.control.generation(0, peer)
    }

    /// How many reconnects of `link` with `peer` succeeded
    /// ([`Node::reconnect_with`]; link 0 is the node's own, as
    /// [`Node::connection_generation`]); 0 for a link never reconnected,
    /// or a rail just opened. `None` for a peer out of range.
    pub fn link_generation(&self, link: u32, peer: usize) -> Option<u32> {
        self.control.generation(link, peer)
    }
}
