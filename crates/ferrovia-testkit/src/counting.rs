//! `Counting`: the cheapest transport that still behaves, for benches and
//! allocation tests, where only ferrovia's own work should be measured.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use ferrovia_channel::transport::{Completion, RecvOp, SendOp, Transport};
use ferrovia_channel::{TransportError, TransportResult};

use crate::double::ok;

/// The cheapest transport that still behaves: it counts what is posted
/// and hands back one completion per signalled op and per receive,
/// through a fixed ring (no lock, no allocation). For the benches, where
/// only ferrovia's own work should be measured. One thread at a time.
pub struct Counting {
    /// A power of two long, indexed by masking (no division per op).
    ring: Box<[AtomicU64]>,
    mask: usize,
    head: AtomicUsize,
    tail: AtomicUsize,
    /// How many ops were posted (send and receive queues).
    pub posted: AtomicUsize,
    peers: usize,
    depth: u32,
    max_inline: u32,
}

impl Counting {
    /// A double over `peers` peers, `depth` deep each way, that inlines
    /// nothing.
    pub fn new(peers: usize, depth: u32) -> Arc<Counting> {
        Counting::with_inline(peers, depth, 0)
    }

    /// The same, offering `max_inline` bytes of inline data (the core then
    /// copies small sends into the request).
    pub fn with_inline(peers: usize, depth: u32, max_inline: u32) -> Arc<Counting> {
        let len = (4 * depth as usize * peers.max(1)).next_power_of_two();
        Arc::new(Counting {
            ring: (0..len).map(|_| AtomicU64::new(0)).collect(),
            mask: len - 1,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            posted: AtomicUsize::new(0),
            peers,
            depth,
            max_inline,
        })
    }

    fn push(&self, wr_id: u64) {
        let t = self.tail.load(Relaxed);
        self.ring[t & self.mask].store(wr_id, Relaxed);
        self.tail.store(t + 1, Relaxed);
    }
}

// SAFETY: touches no memory; reports each signalled op and each receive
// once, in posting order (one FIFO), never more than were posted (the ring
// holds 4x every peer's depth, and the core never has more outstanding); a
// signalled send stands for the unsignalled ones before it, as on RC.
// `flush` fails (it cannot report unsignalled ops it does not keep), which
// the contract allows: a scope that would need it aborts instead.
unsafe impl Transport for Counting {
    fn peers(&self) -> usize {
        self.peers
    }
    fn send_depth(&self, _: usize) -> u32 {
        self.depth
    }
    fn recv_depth(&self, _: usize) -> u32 {
        self.depth
    }
    fn max_inline(&self, _: usize) -> u32 {
        self.max_inline
    }
    unsafe fn post_send(&self, _: usize, ops: &[SendOp]) -> TransportResult<()> {
        self.posted.fetch_add(ops.len(), Relaxed);
        for op in ops.iter().filter(|o| o.signaled) {
            self.push(op.wr_id);
        }
        Ok(())
    }
    unsafe fn post_recv(&self, _: usize, ops: &[RecvOp]) -> TransportResult<()> {
        self.posted.fetch_add(ops.len(), Relaxed);
        for op in ops {
            self.push(op.wr_id);
        }
        Ok(())
    }
    fn poll(&self, out: &mut [Completion]) -> TransportResult<usize> {
        let (h, t) = (self.head.load(Relaxed), self.tail.load(Relaxed));
        let n = (t - h).min(out.len());
        for (i, o) in out[..n].iter_mut().enumerate() {
            *o = ok(self.ring[(h + i) & self.mask].load(Relaxed));
        }
        self.head.store(h + n, Relaxed);
        Ok(n)
    }
    fn wait(&self, out: &mut [Completion], _: Duration) -> TransportResult<usize> {
        self.poll(out)
    }
    fn flush(&self, _: usize) -> TransportResult<()> {
        Err(TransportError::Config(
            "the counting double cannot flush".into(),
        ))
    }
}
