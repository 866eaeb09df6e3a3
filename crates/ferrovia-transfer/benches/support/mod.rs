//! A transport double for the transfer layer's benches and allocation
//! test: it counts what is posted and hands back one completion per
//! signalled op through a fixed ring, touching no memory, so only the
//! transfer layer's and the channel core's own work is measured.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use ferrovia_channel::transport::{Completion, RecvOp, SendOp, Transport};
use ferrovia_channel::{TransportError, TransportResult};
use ferrovia_mr::{MrError, MrRegistry, RegisteredKeys, Registrar};
use ferrovia_types::AccessFlags;

/// The counting double over `peers` peers.
pub struct Counting {
    ring: Box<[AtomicU64]>,
    mask: usize,
    head: AtomicUsize,
    tail: AtomicUsize,
    pub posted: AtomicUsize,
    peers: usize,
    depth: u32,
}

impl Counting {
    pub fn new(peers: usize, depth: u32) -> Arc<Counting> {
        let len = (4 * depth as usize * peers).next_power_of_two();
        Arc::new(Counting {
            ring: (0..len).map(|_| AtomicU64::new(0)).collect(),
            mask: len - 1,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            posted: AtomicUsize::new(0),
            peers,
            depth,
        })
    }
}

// SAFETY: touches no memory; reports each signalled op once, in posting
// order (one FIFO), never more than were posted (the ring holds four
// times every peer's depth, and the core never has more outstanding); a
// signalled op stands for the unsignalled ones before it, as on RC.
// `flush` fails, which the contract allows (nothing here needs one).
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
        0
    }
    unsafe fn post_send(&self, _: usize, ops: &[SendOp]) -> TransportResult<()> {
        self.posted.fetch_add(ops.len(), Relaxed);
        for op in ops.iter().filter(|o| o.signaled) {
            let t = self.tail.load(Relaxed);
            self.ring[t & self.mask].store(op.wr_id, Relaxed);
            self.tail.store(t + 1, Relaxed);
        }
        Ok(())
    }
    unsafe fn post_recv(&self, _: usize, _: &[RecvOp]) -> TransportResult<()> {
        Err(TransportError::Config("no receives here".into()))
    }
    fn poll(&self, out: &mut [Completion]) -> TransportResult<usize> {
        let (h, t) = (self.head.load(Relaxed), self.tail.load(Relaxed));
        let n = (t - h).min(out.len());
        for (i, o) in out[..n].iter_mut().enumerate() {
            *o = Completion {
                wr_id: self.ring[(h + i) & self.mask].load(Relaxed),
                ..Completion::default()
            };
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

struct Keys(AccessFlags);

// SAFETY: fixed keys reporting the asked-for access; nothing uses them.
unsafe impl RegisteredKeys for Keys {
    fn lkey(&self) -> u32 {
        1
    }
    fn rkey(&self) -> u32 {
        1
    }
    fn access(&self) -> AccessFlags {
        self.0
    }
}

/// A registrar that needs no device.
pub struct NoDevice;

// SAFETY: never allocates; reports exactly the asked-for access.
unsafe impl Registrar for NoDevice {
    unsafe fn register(
        &self,
        _: *mut u8,
        _: usize,
        _: Option<u64>,
        access: AccessFlags,
    ) -> Result<Box<dyn RegisteredKeys>, MrError> {
        Ok(Box::new(Keys(access)))
    }
}

pub fn registry() -> MrRegistry {
    MrRegistry::with_registrar(NoDevice)
}
