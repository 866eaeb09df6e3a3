//! A transport double with a shared receive pool: sends complete at once,
//! and the test says which peer's message lands in the oldest pooled
//! receive. Like `Double`, it never touches the memory its ops name.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use ferrovia_channel::transport::{Completion, RecvOp, SendOp, SharedFlush, Transport};
use ferrovia_channel::{TransportError, TransportResult};
use ferrovia_types::WcStatus;

use crate::double::{take_ready, wait_ready};
use parking_lot::Mutex;

/// A pool double over `peers` peers with `depth` pooled receives.
pub struct PoolDouble {
    peers: usize,
    depth: u32,
    flush: SharedFlush,
    /// Pooled receives not yet taken, oldest first.
    pool: Mutex<VecDeque<u64>>,
    done: Mutex<VecDeque<Completion>>,
    /// Whether the pool was stopped silently: it takes nothing more.
    stopped: Mutex<bool>,
}

impl PoolDouble {
    /// A double whose pool flush is `flush`.
    pub fn new(peers: usize, depth: u32, flush: SharedFlush) -> Arc<PoolDouble> {
        Arc::new(PoolDouble {
            peers,
            depth,
            flush,
            pool: Mutex::new(VecDeque::new()),
            done: Mutex::new(VecDeque::new()),
            stopped: Mutex::new(false),
        })
    }

    /// `peer`'s message of `len` bytes lands in the oldest pooled receive
    /// (with `status`); false if the pool is empty or stopped.
    pub fn deliver(&self, peer: u32, len: u32, status: WcStatus) -> bool {
        if *self.stopped.lock() {
            return false;
        }
        let Some(wr_id) = self.pool.lock().pop_front() else {
            return false;
        };
        self.done.lock().push_back(Completion {
            wr_id,
            status,
            byte_len: len,
            peer: Some(peer),
            ..Completion::default()
        });
        true
    }

    /// Pooled receives still waiting for a message.
    pub fn pooled(&self) -> usize {
        self.pool.lock().len()
    }
}

// SAFETY: touches no memory; reports each op once (sends at once, pooled
// receives when `deliver`ed or, after a `Reported` flush, as flushed) and
// only ops that were posted; after a `Silent` flush it reports no pooled
// receive again; depths are constant.
unsafe impl Transport for PoolDouble {
    fn peers(&self) -> usize {
        self.peers
    }
    fn send_depth(&self, _: usize) -> u32 {
        self.depth
    }
    fn recv_depth(&self, _: usize) -> u32 {
        0
    }
    fn max_inline(&self, _: usize) -> u32 {
        0
    }
    fn shared_recv_depth(&self) -> u32 {
        self.depth
    }
    unsafe fn post_send(&self, _: usize, ops: &[SendOp]) -> TransportResult<()> {
        let mut done = self.done.lock();
        done.extend(ops.iter().filter(|o| o.signaled).map(|o| Completion {
            wr_id: o.wr_id,
            ..Completion::default()
        }));
        Ok(())
    }
    unsafe fn post_recv(&self, _: usize, _: &[RecvOp]) -> TransportResult<()> {
        Err(TransportError::Config(
            "the pool double has no per-peer receives".into(),
        ))
    }
    unsafe fn post_shared_recv(&self, ops: &[RecvOp]) -> TransportResult<()> {
        self.pool.lock().extend(ops.iter().map(|o| o.wr_id));
        Ok(())
    }
    fn flush_shared(&self) -> TransportResult<SharedFlush> {
        let mut pool = self.pool.lock();
        match self.flush {
            SharedFlush::Reported => {
                self.done
                    .lock()
                    .extend(pool.drain(..).map(|wr_id| Completion {
                        wr_id,
                        status: WcStatus::WR_FLUSH_ERR,
                        ..Completion::default()
                    }));
            }
            SharedFlush::Silent => *self.stopped.lock() = true,
        }
        Ok(self.flush)
    }
    fn poll(&self, out: &mut [Completion]) -> TransportResult<usize> {
        Ok(take_ready(&self.done, out))
    }
    fn wait(&self, out: &mut [Completion], timeout: Duration) -> TransportResult<usize> {
        Ok(wait_ready(&self.done, out, timeout))
    }
    fn flush(&self, _: usize) -> TransportResult<()> {
        Ok(())
    }
}
