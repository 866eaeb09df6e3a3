//! Test doubles shared by the host tests and the benches: a transport that
//! touches no memory and reports what it is told to, and a registrar that
//! needs no device. They let the scoped core's bookkeeping (slots, drain,
//! flush, list posting, allocation) run on any machine.
#![allow(dead_code, unreachable_pub)]

pub mod pool;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use ferrovia_channel::engine::ChannelCore;
use ferrovia_channel::transport::{Completion, RecvOp, SendOp, Transport};
use ferrovia_channel::{ChannelConfig, MultiPeer, ScopeTarget, TransportError, TransportResult};
use ferrovia_mr::{MrError, MrRegistry, RegisteredKeys, Registrar};
use ferrovia_types::{AccessFlags, WcStatus};
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
    pub flushes: AtomicUsize,
    /// Set when the peer "disconnected" (`disconnect`).
    gone: Mutex<Option<std::net::SocketAddr>>,
}

impl Double {
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

fn ok(wr_id: u64) -> Completion {
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
        let mut q = self.done.lock();
        let n = out.len().min(q.len());
        for (o, c) in out.iter_mut().zip(q.drain(..n)) {
            *o = c;
        }
        Ok(n)
    }
    fn wait(&self, out: &mut [Completion], timeout: Duration) -> TransportResult<usize> {
        let n = self.poll(out)?;
        if n == 0 {
            // Nothing will arrive by itself: sleep a little, as a CQ would.
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
        }
        Ok(n)
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

/// A scope target over one engine.
pub struct Target(pub ChannelCore);

impl ScopeTarget for Target {
    fn core(&self) -> &ChannelCore {
        &self.0
    }
}

impl MultiPeer for Target {}

/// A scope target over `transport` with `cfg`.
pub fn target<T: Transport + 'static>(transport: &Arc<T>, cfg: ChannelConfig) -> Target {
    Target(ChannelCore::new(transport.clone(), cfg))
}

struct Keys(u32, AccessFlags);

// SAFETY: fixed keys reporting the asked-for access; no device or peer
// ever uses them.
unsafe impl RegisteredKeys for Keys {
    fn lkey(&self) -> u32 {
        self.0
    }
    fn rkey(&self) -> u32 {
        self.0
    }
    fn access(&self) -> AccessFlags {
        self.1
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
        Ok(Box::new(Keys(1, access)))
    }
}

/// A registry over [`NoDevice`].
pub fn registry() -> MrRegistry {
    MrRegistry::with_registrar(NoDevice)
}

/// The cheapest transport that still behaves: it counts what is posted
/// and hands back one completion per signalled op and per receive,
/// through a fixed ring (no lock, no allocation). For the benches, where
/// only ferrovia's own work should be measured. One thread at a time.
pub struct Counting {
    /// A power of two long, indexed by masking (no division per op).
    ring: Box<[std::sync::atomic::AtomicU64]>,
    mask: usize,
    head: AtomicUsize,
    tail: AtomicUsize,
    pub posted: AtomicUsize,
    depth: u32,
}

impl Counting {
    pub fn new(depth: u32) -> Arc<Counting> {
        let len = (4 * depth as usize).next_power_of_two();
        Arc::new(Counting {
            ring: (0..len)
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
            mask: len - 1,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            posted: AtomicUsize::new(0),
            depth,
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
// holds 4x the depth, and the core never has more outstanding); a
// signalled send stands for the unsignalled ones before it, as on RC.
// `flush` fails (it cannot report unsignalled ops it does not keep), which
// the contract allows: a scope that would need it aborts instead.
unsafe impl Transport for Counting {
    fn peers(&self) -> usize {
        1
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

/// A global allocator that counts allocations while counting is on: a
/// test binary installs it with
/// `#[global_allocator] static A: support::CountingAlloc = support::CountingAlloc;`.
pub struct CountingAlloc;

static COUNTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; it only
// counts.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            ALLOCATIONS.fetch_add(1, Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: same contract as ours.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            ALLOCATIONS.fetch_add(1, Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` and returns what it returned with the number of allocations
/// it made (on any thread: run it where nothing else allocates).
pub fn count_allocations<R>(f: impl FnOnce() -> R) -> (R, usize) {
    ALLOCATIONS.store(0, Relaxed);
    COUNTING.store(true, Relaxed);
    let r = f();
    COUNTING.store(false, Relaxed);
    (r, ALLOCATIONS.swap(0, Relaxed))
}
