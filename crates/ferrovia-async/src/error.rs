//! Errors of the async layer.

use ferrovia_channel::TransportError;
use ferrovia_node::BarrierError;

/// Why an async engine could not start, or a barrier failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AsyncError {
    /// Not called inside a tokio runtime (the reactor is a task of it).
    #[error(
        "ferrovia-async needs a tokio runtime: call Async::new inside one (with IO and time enabled)"
    )]
    NoRuntime,
    /// The target's engine has a scope open, whose drain would settle the
    /// engine's owned requests behind their futures' backs.
    #[error("a scope over this engine is open: the async layer and scopes do not share an engine")]
    ScopeOpen,
    /// The barrier failed (naming the ranks that did not arrive).
    #[error(transparent)]
    Barrier(#[from] BarrierError),
    /// The transport failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// [`Async::shutdown`](crate::Async::shutdown) flushed sends, writes
    /// or atomics still outstanding at its deadline (whether each reached
    /// its peer is unknown), or some flushed requests were never reported
    /// (the engine keeps their buffers). What it did, inside.
    #[error(
        "shutdown flushed {} send(s), write(s) or atomic(s) still outstanding after {:?} (peers {:?}); {} flushed request(s) never reported",
        .0.flushed.outbound,
        .0.waited,
        .0.flushed.peers,
        .0.unreported
    )]
    ShutdownIncomplete(Box<crate::Shutdown>),
}

/// A failed operation: what went wrong, and its buffer, handed back (the
/// device and UCX no longer touch it).
pub struct Failed<B> {
    /// What went wrong: a completion error names the peer, the verb's
    /// status and the transport's detail; a refused post says why.
    pub error: TransportError,
    /// The operation's buffer.
    pub buf: B,
}

impl<B> Failed<B> {
    /// The peer the error names, if it names one.
    pub fn peer(&self) -> Option<usize> {
        match &self.error {
            TransportError::Completion(c) => c.peer,
            TransportError::Broken { peer }
            | TransportError::NoSuchPeer { peer, .. }
            | TransportError::QueueFull { peer, .. }
            | TransportError::AtomicsUnsupported { peer }
            | TransportError::SharedPoolOnly { peer } => Some(*peer),
            _ => None,
        }
    }

    /// The buffer, dropping the error.
    pub fn into_buf(self) -> B {
        self.buf
    }
}

impl<B> std::fmt::Debug for Failed<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Failed")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<B> std::fmt::Display for Failed<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl<B> std::error::Error for Failed<B> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
