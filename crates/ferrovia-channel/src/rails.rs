//! Several transports to the same peers as one: a rail is one of them (an
//! RDMA device with its own protection domain and completion queue, or a
//! UCX worker of its own), and peer `rail * peers + p` of the whole is
//! peer `p` over `rail`. So one channel core, and one scope, drives every
//! rail: its slot table assigns every op's `wr_id`, each rail reports the
//! ops posted to it, and the core sees one completion stream.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::error::{TransportError, TransportResult};
use crate::op::{Completion, RecvOp, SendOp};
use crate::seam::Transport;

/// How long a wait over several rails sleeps in one rail's wait before it
/// looks at the others.
const SLICE: Duration = Duration::from_micros(200);

/// Rails as one transport (see the module docs). No shared receive pool:
/// receives are per (rail, peer).
pub struct Rails {
    rails: Vec<Arc<dyn Transport>>,
    peers: usize,
    /// The rail polled first next time, so none is starved.
    next: AtomicUsize,
}

impl std::fmt::Debug for Rails {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rails")
            .field("rails", &self.rails.len())
            .field("peers", &self.peers)
            .finish()
    }
}

impl Rails {
    /// Rails over `rails`, which must all reach the same number of peers
    /// (at least one rail). A rail's transport must not be driven by
    /// anything else from now on.
    pub fn new(rails: Vec<Arc<dyn Transport>>) -> TransportResult<Rails> {
        let Some(first) = rails.first() else {
            return Err(TransportError::Config("rails: none given".into()));
        };
        let peers = first.peers();
        if let Some((r, t)) = rails.iter().enumerate().find(|(_, t)| t.peers() != peers) {
            return Err(TransportError::Config(format!(
                "rails: rail {r} reaches {} peers, rail 0 {peers}",
                t.peers()
            )));
        }
        Ok(Rails {
            rails,
            peers,
            next: AtomicUsize::new(0),
        })
    }

    /// Number of rails.
    pub fn rails(&self) -> usize {
        self.rails.len()
    }

    /// Peers each rail reaches.
    pub fn peers_per_rail(&self) -> usize {
        self.peers
    }

    /// The peer of the whole that is `peer` over `rail`.
    pub fn peer_of(&self, rail: usize, peer: usize) -> usize {
        rail * self.peers + peer
    }

    /// The rail and its peer of a peer of the whole.
    fn split(&self, peer: usize) -> TransportResult<(&Arc<dyn Transport>, usize)> {
        let (rail, p) = (peer / self.peers.max(1), peer % self.peers.max(1));
        match self.rails.get(rail) {
            Some(t) => Ok((t, p)),
            None => Err(TransportError::NoSuchPeer {
                peer,
                count: self.peers(),
            }),
        }
    }

    /// Polls every rail once, from the one after last time's first, into
    /// `out`; how many completions.
    fn poll_all(&self, out: &mut [Completion]) -> TransportResult<usize> {
        let r = self.rails.len();
        let start = self.next.fetch_add(1, Relaxed) % r;
        let mut n = 0;
        for i in 0..r {
            if n == out.len() {
                break;
            }
            n += self.rails[(start + i) % r].poll(&mut out[n..])?;
        }
        Ok(n)
    }
}

// SAFETY: every op goes to exactly one rail, unchanged (its wr_id is the
// core's), and that rail's own contract covers it: it reports each op
// once, in posting order per (rail, peer) and queue, which is the order
// per peer of the whole, only after it no longer touches the op's memory;
// `flush(peer)` flushes that rail's peer, which then reports every op of
// it; depths are the rails' (constant), receive lengths are the rails'.
// Completions of all rails come out of `poll` and `wait` as they came in.
unsafe impl Transport for Rails {
    fn peers(&self) -> usize {
        self.rails.len() * self.peers
    }

    fn send_depth(&self, peer: usize) -> u32 {
        self.split(peer).map_or(1, |(t, p)| t.send_depth(p))
    }

    fn recv_depth(&self, peer: usize) -> u32 {
        self.split(peer).map_or(1, |(t, p)| t.recv_depth(p))
    }

    fn max_inline(&self, peer: usize) -> u32 {
        self.split(peer).map_or(0, |(t, p)| t.max_inline(p))
    }

    fn atomics(&self) -> bool {
        self.rails.iter().all(|t| t.atomics())
    }

    unsafe fn post_send(&self, peer: usize, ops: &[SendOp]) -> TransportResult<()> {
        let (t, p) = self.split(peer)?;
        // SAFETY: the caller's promise for `peer` is the promise for `p`
        // of its rail.
        unsafe { t.post_send(p, ops) }
    }

    unsafe fn post_send_and_poll(
        &self,
        peer: usize,
        ops: &[SendOp],
        out: &mut [Completion],
    ) -> TransportResult<usize> {
        let (t, p) = self.split(peer)?;
        // SAFETY: as for post_send; what it hands back is that rail's
        // completions, in its order, as its `poll` would.
        unsafe { t.post_send_and_poll(p, ops, out) }
    }

    unsafe fn post_recv(&self, peer: usize, ops: &[RecvOp]) -> TransportResult<()> {
        let (t, p) = self.split(peer)?;
        // SAFETY: as for post_send.
        unsafe { t.post_recv(p, ops) }
    }

    fn poll(&self, out: &mut [Completion]) -> TransportResult<usize> {
        self.poll_all(out)
    }

    fn wait(&self, out: &mut [Completion], timeout: Duration) -> TransportResult<usize> {
        if let [only] = &self.rails[..] {
            return only.wait(out, timeout);
        }
        let deadline = ferrovia_types::deadline_after(timeout);
        loop {
            let n = self.poll_all(out)?;
            if n > 0 {
                return Ok(n);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(0);
            }
            // Sleeps a little in each rail's own wait in turn.
            let r = self.next.fetch_add(1, Relaxed) % self.rails.len();
            let n = self.rails[r].wait(out, left.min(SLICE))?;
            if n > 0 {
                return Ok(n);
            }
        }
    }

    fn flush(&self, peer: usize) -> TransportResult<()> {
        let (t, p) = self.split(peer)?;
        t.flush(p)
    }

    fn renew(&self, peer: usize) -> TransportResult<Vec<u8>> {
        let (t, p) = self.split(peer)?;
        t.renew(p)
    }

    fn connect_renewed(&self, peer: usize, theirs: &[u8]) -> TransportResult<()> {
        let (t, p) = self.split(peer)?;
        t.connect_renewed(p, theirs)
    }

    fn stale_dropped(&self) -> u64 {
        self.rails.iter().map(|t| t.stale_dropped()).sum()
    }

    fn disconnected(&self, peer: usize) -> Option<std::net::SocketAddr> {
        let (t, p) = self.split(peer).ok()?;
        t.disconnected(p)
    }

    fn revocations(&self, peer: usize) -> u64 {
        self.split(peer).map_or(0, |(t, p)| t.revocations(p))
    }
}
