//! `Double`: a transport over any number of peers that touches no memory
//! and completes what is posted at once or when the test says (held ops,
//! one failure, a full queue, a flush, a disconnected peer). It lets the
//! scoped core's bookkeeping (slots, drain, flush, list posting) run on
//! any machine.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use ferrovia_channel::transport::{Completion, RecvOp, SendOp, Transport};
use ferrovia_channel::{TransportError, TransportResult};
use ferrovia_types::WcStatus;
use parking_lot::Mutex;

/// When the double completes what is posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every signalled send and every receive completes at once.
    Instant,
    /// Nothing completes until `complete_all` or a flush.
    Held,
}

/// A transport double over `peers` peers. It never reads or writes the
/// memory its ops name: it only keeps their ids.
pub struct Double {
    mode: Mutex<Mode>,
    peers: usize,
    depth: u32,
    /// Completions ready to be polled.
    done: Mutex<VecDeque<Completion>>,
    /// Ops posted and not yet reported, per peer: (wr_id, signalled).
    outstanding: Mutex<Vec<VecDeque<(u64, bool)>>>,
    /// How many ops were posted (send and receive queues).
    pub posted: AtomicUsize,
    /// After this many more ops, post_send fails (a full queue).
    fail_after: Mutex<Option<usize>>,
    /// How many flushes the core asked for.
    pub flushes: AtomicUsize,
    /// Set when the peer "disconnected" (`disconnect`).
    gone: Mutex<Option<std::net::SocketAddr>>,
}

impl Double {
    /// A double over `peers` peers, `depth` deep each way, completing as
    /// `mode` says.
    pub fn new(peers: usize, depth: u32, mode: Mode) -> Arc<Double> {
        Arc::new(Double {
            mode: Mutex::new(mode),
            peers,
            depth,
            done: Mutex::new(VecDeque::with_capacity(4 * depth as usize)),
            outstanding: Mutex::new(
                (0..peers)
                    .map(|_| VecDeque::with_capacity(2 * depth as usize))
                    .collect(),
            ),
            posted: AtomicUsize::new(0),
            fail_after: Mutex::new(None),
            flushes: AtomicUsize::new(0),
            gone: Mutex::new(None),
        })
    }

    /// From now on, completes as `mode` says.
    pub fn set_mode(&self, mode: Mode) {
        *self.mode.lock() = mode;
    }

    /// Makes `post_send` accept `n` more ops, then fail.
    pub fn fail_after(&self, n: usize) {
        *self.fail_after.lock() = Some(n);
    }

    /// Completes every outstanding op successfully.
    pub fn complete_all(&self) {
        let mut out = self.outstanding.lock();
        let mut done = self.done.lock();
        for q in out.iter_mut() {
            for (wr_id, signaled) in q.drain(..) {
                if signaled {
                    done.push_back(ok(wr_id));
                }
            }
        }
    }

    /// Fails the oldest outstanding op of `peer` and leaves the rest
    /// held: a transport that reports one failure and flushes nothing.
    pub fn fail_one(&self, peer: usize) {
        if let Some((wr_id, _)) = self.outstanding.lock()[peer].pop_front() {
            self.done.lock().push_back(Completion {
                wr_id,
                status: WcStatus::RETRY_EXC_ERR,
                ..Completion::default()
            });
        }
    }

    /// The peer at `addr` disconnected: every peer's outstanding ops are
    /// flushed, and `disconnected` names the address from now on.
    pub fn disconnect(&self, addr: std::net::SocketAddr) {
        *self.gone.lock() = Some(addr);
        for peer in 0..self.peers {
            let _ = Transport::flush(self, peer);
        }
    }

    /// Ops posted and not yet reported to the core.
    pub fn in_flight(&self) -> usize {
        self.outstanding
            .lock()
            .iter()
            .map(VecDeque::len)
            .sum::<usize>()
            + self.done.lock().len()
    }
}

/// Moves the oldest of `done` into `out`: how many.
pub(crate) fn take_ready(done: &Mutex<VecDeque<Completion>>, out: &mut [Completion]) -> usize {
    let mut q = done.lock();
    let n = out.len().min(q.len());
    for (o, c) in out.iter_mut().zip(q.drain(..n)) {
        *o = c;
    }
    n
}

/// [`take_ready`], sleeping a little when nothing is there: nothing
/// arrives by itself, and a CQ's wait would sleep too.
pub(crate) fn wait_ready(
    done: &Mutex<VecDeque<Completion>>,
    out: &mut [Completion],
    timeout: Duration,
) -> usize {
    let n = take_ready(done, out);
    if n == 0 {
        std::thread::sleep(timeout.min(Duration::from_millis(1)));
    }
    n
}

/// A successful completion of `wr_id`.
pub(crate) fn ok(wr_id: u64) -> Completion {
    Completion {
        wr_id,
        ..Completion::default()
    }
}

// SAFETY: touches no memory; reports each op once, in posting order per
// peer (a FIFO per peer, and flushes report in that order too), and only
// ops that were posted; `byte_len` is always 0; depths are constant.
unsafe impl Transport for Double {
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
        64
    }
    unsafe fn post_send(&self, peer: usize, ops: &[SendOp]) -> TransportResult<()> {
        if let Some(left) = self.fail_after.lock().as_mut() {
            if *left < ops.len() {
                return Err(TransportError::Config("the double's queue is full".into()));
            }
            *left -= ops.len();
        }
        self.posted.fetch_add(ops.len(), Relaxed);
        let mut out = self.outstanding.lock();
        out[peer].extend(ops.iter().map(|o| (o.wr_id, o.signaled)));
        if *self.mode.lock() == Mode::Instant {
            // A signalled op completes, and with it the unsignalled ones
            // before it (RC semantics); unsignalled ones after the last
            // signalled op stay outstanding until a flush reports them.
            if let Some(last) = out[peer].iter().rposition(|&(_, signaled)| signaled) {
                let mut done = self.done.lock();
                for (wr_id, signaled) in out[peer].drain(..=last) {
                    if signaled {
                        done.push_back(ok(wr_id));
                    }
                }
            }
        }
        Ok(())
    }
    unsafe fn post_recv(&self, peer: usize, ops: &[RecvOp]) -> TransportResult<()> {
        self.posted.fetch_add(ops.len(), Relaxed);
        if *self.mode.lock() == Mode::Instant {
            self.done.lock().extend(ops.iter().map(|o| ok(o.wr_id)));
        } else {
            // Receives sit in their own queue; a flush reports them too.
            let mut out = self.outstanding.lock();
            out[peer].extend(ops.iter().map(|o| (o.wr_id, true)));
        }
        Ok(())
    }
    fn poll(&self, out: &mut [Completion]) -> TransportResult<usize> {
        Ok(take_ready(&self.done, out))
    }
    fn wait(&self, out: &mut [Completion], timeout: Duration) -> TransportResult<usize> {
        Ok(wait_ready(&self.done, out, timeout))
    }
    fn disconnected(&self, _peer: usize) -> Option<std::net::SocketAddr> {
        *self.gone.lock()
    }
    fn flush(&self, peer: usize) -> TransportResult<()> {
        self.flushes.fetch_add(1, Relaxed);
        let mut out = self.outstanding.lock();
        let mut done = self.done.lock();
        // A flushed QP reports every outstanding WR, signalled or not.
        done.extend(out[peer].drain(..).map(|(wr_id, _)| Completion {
            wr_id,
            status: WcStatus::WR_FLUSH_ERR,
            ..Completion::default()
        }));
        Ok(())
    }
}
