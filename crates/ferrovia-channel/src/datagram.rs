//! Datagrams: unreliable, unconnected messages of a bounded size to any
//! peer by index, the same API on every backend ([`Datagrams`] over the
//! [`DatagramTransport`] seam). Verbs sends them on one UD queue pair
//! (`ferrovia-verbs-transport`), any other transport through a channel
//! with a shared receive pool ([`ChannelDatagrams`](crate::ChannelDatagrams):
//! UCX).
//!
//! What the API promises on every backend: a message longer than the
//! limit is refused before anything is sent
//! ([`TransportError::DatagramTooLong`]); a lost message is no error (the
//! sender learns nothing, the receiver's wait ends empty); a message longer
//! than the buffer it is received into is cut, and says so
//! ([`Datagram::truncated`]). Messages are copied: no memory of the
//! program is ever lent to the device, so nothing here is unsafe to call.

use std::time::Duration;

use crate::error::{TransportError, TransportResult};

/// A datagram that arrived: who sent it and how long it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    from: usize,
    len: usize,
    copied: usize,
}

impl Datagram {
    /// A datagram of `len` bytes from peer `from`, of which `copied` (at
    /// most `len`) went into the receiver's buffer.
    pub fn new(from: usize, len: usize, copied: usize) -> Datagram {
        Datagram {
            from,
            len,
            copied: copied.min(len),
        }
    }

    /// The sending peer's index.
    pub fn from(&self) -> usize {
        self.from
    }

    /// The message's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it was empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes that went into the buffer: the message, or its start
    /// when [`Datagram::truncated`].
    pub fn copied(&self) -> usize {
        self.copied
    }

    /// Whether the message was longer than the buffer it was received
    /// into, so only its start arrived.
    pub fn truncated(&self) -> bool {
        self.copied < self.len
    }
}

/// A backend of datagrams: the seam [`Datagrams`] drives. It owns every
/// buffer the device or library touches and copies messages in and out,
/// so it is a safe trait.
pub trait DatagramTransport: Send {
    /// How many peers it reaches (indices `0..peers()`).
    fn peers(&self) -> usize;

    /// The largest message it can carry.
    fn max_message(&self) -> usize;

    /// Sends `data` (at most `max_message()` bytes, checked by the caller)
    /// to `peer`; returns once the message is on its way and `data` may
    /// be reused, which says nothing about its arrival. Waits at most
    /// `timeout` for room to send.
    fn send_to(&mut self, peer: usize, data: &[u8], timeout: Duration) -> TransportResult<()>;

    /// Waits up to `timeout` for a message and copies it into `buf` (cut
    /// to its length); `Ok(None)` if none arrived.
    fn recv_into(&mut self, buf: &mut [u8], timeout: Duration)
    -> TransportResult<Option<Datagram>>;

    /// The backend in words.
    fn describe(&self) -> String;
}

/// A datagram channel to a set of peers: messages of at most
/// [`Datagrams::max_message`] bytes, each to one peer, unreliable (a
/// message may be lost, and then nothing says so) and unordered across
/// senders. A `Node` opens one whose limit every rank shares
/// (`Node::open_datagrams`).
pub struct Datagrams {
    transport: Box<dyn DatagramTransport>,
    max: usize,
}

impl Datagrams {
    /// Datagrams over `transport`, limited to `max` bytes (at most the
    /// transport's own limit).
    pub fn new(transport: Box<dyn DatagramTransport>, max: usize) -> Datagrams {
        let max = max.min(transport.max_message());
        Datagrams { transport, max }
    }

    /// The largest message: longer ones are refused before sending.
    pub fn max_message(&self) -> usize {
        self.max
    }

    /// How many peers it reaches.
    pub fn peers(&self) -> usize {
        self.transport.peers()
    }

    /// The backend in words.
    pub fn describe(&self) -> String {
        self.transport.describe()
    }

    /// Sends `data` to `peer`: a typed error if it is empty, longer than
    /// [`Datagrams::max_message`], or `peer` is out of range; else returns
    /// once `data` may be reused (not once it arrived: it may be lost).
    pub fn send_to(&mut self, peer: usize, data: &[u8], timeout: Duration) -> TransportResult<()> {
        if data.is_empty() {
            return Err(TransportError::Config(
                "a datagram needs at least one byte".into(),
            ));
        }
        if data.len() > self.max {
            return Err(TransportError::DatagramTooLong {
                len: data.len(),
                max: self.max,
            });
        }
        let count = self.peers();
        if peer >= count {
            return Err(TransportError::NoSuchPeer { peer, count });
        }
        self.transport.send_to(peer, data, timeout)
    }

    /// Waits up to `timeout` for a message from any peer and copies it
    /// into `buf`: `Ok(None)` if none came (a lost message is not an
    /// error); a message longer than `buf` is cut and says so
    /// ([`Datagram::truncated`]).
    pub fn recv(&mut self, buf: &mut [u8], timeout: Duration) -> TransportResult<Option<Datagram>> {
        self.transport.recv_into(buf, timeout)
    }
}

impl std::fmt::Debug for Datagrams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Datagrams")
            .field("backend", &self.describe())
            .field("peers", &self.peers())
            .field("max_message", &self.max)
            .finish()
    }
}
