//! The link of a connection made by address: the owner's own TCP
//! connection to the peer (the front door its handshake went through),
//! kept open for the life of the connection. UCX 1.13's shared memory has
//! no peer failure handling, so the link is what tells that the peer went
//! away (it closes, or resets): the peer's work then fails at once, as a
//! connection manager's disconnect does on verbs.

use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::Engine;
use crate::ucp::Status;

/// How often a turn looks at the link (the progress thread sleeps at most
/// 100 ms, so a disconnect shows within about that long when idle).
const LOOK_EVERY: Duration = Duration::from_millis(1);

pub(crate) struct Link {
    stream: TcpStream,
    last: Instant,
}

impl Link {
    pub(crate) fn new(stream: TcpStream) -> std::io::Result<Link> {
        stream.set_nonblocking(true)?;
        Ok(Link {
            stream,
            last: Instant::now(),
        })
    }

    /// Whether the peer closed or reset it. Bytes it sends after the
    /// handshake mean nothing and are dropped, a little at a time.
    fn closed(&mut self) -> bool {
        let mut scratch = [0u8; 64];
        match self.stream.read(&mut scratch) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                false
            }
            Err(_) => true,
        }
    }
}

impl Engine {
    /// Attaches the owner's link to the peer of a connection made by
    /// address.
    pub(crate) fn set_link(&mut self, stream: TcpStream) -> std::io::Result<()> {
        self.link = Some(Link::new(stream)?);
        Ok(())
    }

    /// Looks at the link now and then; a closed one fails the peer (as
    /// departed: it is gone, not flushed). Whether it did.
    pub(super) fn watch_link(&mut self) -> bool {
        let Some(link) = &mut self.link else {
            return false;
        };
        if link.last.elapsed() < LOOK_EVERY {
            return false;
        }
        link.last = Instant::now();
        if !link.closed() {
            return false;
        }
        self.link = None;
        if let Some(p) = self.peers.get_mut(0) {
            p.departed = true;
        }
        tracing::debug!("ucx: the peer closed its link; failing its work");
        self.lose_peer(0, Status::CONNECTION_RESET);
        true
    }
}
