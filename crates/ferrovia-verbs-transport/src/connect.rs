//! What only verbs channels do: trade endpoints, connect a queue pair to
//! one, renew a peer's queue pair. Extension traits, so the channel crate
//! knows no backend: `MultiChannel` and `Channel` get these methods where
//! `VerbsMultiChannel` / `VerbsChannel` are in scope.

use ferrovia_channel::{Channel, MultiChannel, TransportError, TransportResult};
use ferrovia_verbs::{Endpoint, ProtectionDomain};

use crate::transport::VerbsTransport;

/// The verbs operations of a [`MultiChannel`] whose transport is a
/// [`VerbsTransport`] (built by [`VerbsBuilder`](crate::VerbsBuilder));
/// over another transport they fail with [`TransportError::Config`].
pub trait VerbsMultiChannel {
    /// The verbs transport underneath.
    fn verbs(&self) -> TransportResult<&VerbsTransport>;

    /// The shared protection domain, when the connections are verbs.
    fn pd(&self) -> Option<&ProtectionDomain> {
        self.verbs().ok().map(VerbsTransport::pd)
    }

    /// What peer `peer` needs to connect its side to us.
    fn endpoint(&self, peer: usize) -> TransportResult<Endpoint>;

    /// Connects the queue pair of `peer` to its endpoint.
    fn connect(&mut self, peer: usize, remote: &Endpoint) -> TransportResult<()>;

    /// The first half of [`VerbsMultiChannel::reconnect`]: a fresh queue
    /// pair for `peer`, not yet connected; returns its endpoint. Finish
    /// with [`VerbsMultiChannel::connect`].
    fn renew_endpoint(&mut self, peer: usize) -> TransportResult<Endpoint>;

    /// Replaces the connection to `peer` with a fresh queue pair (a new QP
    /// on the same completion queue, the old one left in the error state
    /// and freed by a later reconnect) and connects it: `exchange` gets
    /// the new endpoint, must hand it to the peer, which renews its side
    /// of this connection the same way, and returns the peer's new
    /// endpoint. The other peers' connections are untouched. Between the
    /// renewal and the connect, posts to `peer` fail with
    /// [`TransportError::Broken`].
    ///
    /// For a connection a flush or an error completion left in the error
    /// state. No work is outstanding here: `&mut self` means no scope is
    /// open, and every scope drained its work before it ended.
    fn reconnect<E: From<TransportError>>(
        &mut self,
        peer: usize,
        exchange: impl FnOnce(Endpoint) -> Result<Endpoint, E>,
    ) -> Result<(), E> {
        let mine = self.renew_endpoint(peer)?;
        let theirs = exchange(mine)?;
        self.connect(peer, &theirs)?;
        Ok(())
    }
}

impl VerbsMultiChannel for MultiChannel {
    fn verbs(&self) -> TransportResult<&VerbsTransport> {
        self.transport_as::<VerbsTransport>().ok_or_else(|| {
            TransportError::Config(
                "endpoints and connect are verbs operations; this channel runs over another transport"
                    .into(),
            )
        })
    }

    fn endpoint(&self, peer: usize) -> TransportResult<Endpoint> {
        self.verbs()?.endpoint(peer)
    }

    fn connect(&mut self, peer: usize, remote: &Endpoint) -> TransportResult<()> {
        self.connect_peer_with(peer, |t: &VerbsTransport| t.connect(peer, remote))
    }

    fn renew_endpoint(&mut self, peer: usize) -> TransportResult<Endpoint> {
        if self.shared_pool_flushed() {
            // Its SRQ still holds receives no QP may take: a new QP
            // attached to it would.
            return Err(TransportError::SharedPoolFlushed);
        }
        self.renew_peer_with(peer, |t: &VerbsTransport| t.renew_qp(peer))
    }
}

/// The verbs operations of a one-peer [`Channel`] (see
/// [`VerbsMultiChannel`]).
pub trait VerbsChannel {
    /// The verbs transport underneath.
    fn verbs(&self) -> TransportResult<&VerbsTransport>;

    /// The channel's protection domain, when its connection is a verbs
    /// queue pair.
    fn pd(&self) -> Option<&ProtectionDomain> {
        self.verbs().ok().map(VerbsTransport::pd)
    }

    /// What the peer needs to connect its side to us.
    fn endpoint(&self) -> TransportResult<Endpoint>;

    /// Connects the queue pair to the peer's endpoint.
    fn connect(&mut self, remote: &Endpoint) -> TransportResult<()>;

    /// A fresh queue pair, not yet connected (see
    /// [`VerbsMultiChannel::renew_endpoint`]).
    fn renew_endpoint(&mut self) -> TransportResult<Endpoint>;

    /// Replaces the connection with a fresh queue pair and connects it
    /// (see [`VerbsMultiChannel::reconnect`]).
    fn reconnect<E: From<TransportError>>(
        &mut self,
        exchange: impl FnOnce(Endpoint) -> Result<Endpoint, E>,
    ) -> Result<(), E>;
}

impl VerbsChannel for Channel {
    fn verbs(&self) -> TransportResult<&VerbsTransport> {
        self.as_multi().verbs()
    }

    fn endpoint(&self) -> TransportResult<Endpoint> {
        self.as_multi().endpoint(0)
    }

    fn connect(&mut self, remote: &Endpoint) -> TransportResult<()> {
        self.as_multi_mut().connect(0, remote)
    }

    fn renew_endpoint(&mut self) -> TransportResult<Endpoint> {
        self.as_multi_mut().renew_endpoint(0)
    }

    fn reconnect<E: From<TransportError>>(
        &mut self,
        exchange: impl FnOnce(Endpoint) -> Result<Endpoint, E>,
    ) -> Result<(), E> {
        self.as_multi_mut().reconnect(0, exchange)
    }
}
