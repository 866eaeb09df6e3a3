//! What the engine counts as it posts and routes, per peer: operations and
//! bytes by kind, completions by status, flushes, reconnects, and the
//! latency of a sample of signalled requests. One call per posted request
//! ([`Counters::sent`], [`Counters::receive_posted`]) and one per routed
//! completion ([`Counters::completed`]), under the engine's borrow, so
//! plain integers suffice; `stats` turns them into a snapshot.

use std::time::Instant;

use hdrhistogram::Histogram;

use crate::op::{Completion, OpKind, SendOp};
use crate::slots::Meta;

/// One signalled send-queue request in this many has its latency
/// measured (one at a time): a clock read costs about as much as
/// everything else the engine does for a request (~20 ns of ~35), so
/// reading two for each would double the per-request cost.
pub(crate) const LATENCY_SAMPLE: u32 = 64;

/// Kinds of operations, as the counters index them.
pub(crate) const KINDS: usize = 5;
pub(crate) const SEND: usize = 0;
pub(crate) const WRITE: usize = 1;
pub(crate) const READ: usize = 2;
pub(crate) const ATOMIC: usize = 3;
pub(crate) const RECEIVE: usize = 4;

/// Completion statuses counted one by one (the verbs codes 0..=22); any
/// other lands in the last bucket.
pub(crate) const STATUSES: usize = 24;

/// Latencies recorded, in nanoseconds: from 10 ns to 100 s (beyond, the
/// largest), two significant digits.
const LOWEST_NS: u64 = 10;
const HIGHEST_NS: u64 = 100_000_000_000;
const SIGFIG: u8 = 2;

/// The counts of one peer.
#[derive(Clone)]
pub(crate) struct PeerCounters {
    pub(crate) ops: [u64; KINDS],
    pub(crate) bytes: [u64; KINDS],
    /// Completions by status; success, the common case, apart.
    pub(crate) succeeded: u64,
    pub(crate) completions: [u64; STATUSES],
    pub(crate) flushes: u64,
    pub(crate) reconnects: u64,
    /// Made on the first request to the peer (~25 KiB), so peers without
    /// traffic cost no memory and steady-state posting allocates nothing.
    pub(crate) latency: Option<Box<Histogram<u64>>>,
}

impl PeerCounters {
    fn new() -> PeerCounters {
        PeerCounters {
            ops: [0; KINDS],
            bytes: [0; KINDS],
            succeeded: 0,
            completions: [0; STATUSES],
            flushes: 0,
            reconnects: 0,
            latency: None,
        }
    }
}

/// The engine's counters.
pub(crate) struct Counters {
    pub(crate) peers: Vec<PeerCounters>,
    /// Receives posted to the shared pool (their peer is known only at
    /// completion).
    pub(crate) pool_receives: u64,
    /// Signalled requests left until the next is sampled.
    countdown: u32,
    /// The slot of the request being timed (one at a time), or
    /// `u32::MAX`; when it was posted, in ns since `base`.
    sampled: u32,
    sampled_at: u64,
    base: Instant,
}

fn kind_index(kind: OpKind) -> usize {
    match kind {
        OpKind::Send => SEND,
        OpKind::Write => WRITE,
        OpKind::Read => READ,
        OpKind::FetchAdd | OpKind::CompareSwap => ATOMIC,
    }
}

impl Counters {
    /// Counters for `peers` peers.
    pub(crate) fn new(peers: usize) -> Counters {
        Counters {
            peers: vec![PeerCounters::new(); peers],
            pool_receives: 0,
            countdown: LATENCY_SAMPLE,
            sampled: u32::MAX,
            sampled_at: 0,
            base: Instant::now(),
        }
    }

    /// A send-queue request the transport took: its kind and bytes (what
    /// a send or write gathers, what a read asks for, an atomic's word),
    /// and, one signalled request in [`LATENCY_SAMPLE`], the time.
    #[inline]
    pub(crate) fn sent(&mut self, peer: usize, op: &SendOp) {
        if let Some(p) = self.peers.get_mut(peer) {
            if p.latency.is_none() {
                // On the first request to the peer, not at its first
                // sample: steady-state posting allocates nothing.
                make_histogram(&mut p.latency);
            }
            let k = kind_index(op.kind);
            // One element is the common case: no loop for it.
            let bytes = match op.sges() {
                [one] => u64::from(one.length()),
                many => many.iter().map(|s| u64::from(s.length())).sum(),
            };
            p.ops[k] += 1;
            p.bytes[k] += bytes;
        }
        if op.signaled {
            self.countdown -= 1;
            if self.countdown == 0 {
                self.sample(op.wr_id as u32);
            }
        }
    }

    /// Each of `ops`, which the transport took for `peer`.
    #[inline]
    pub(crate) fn sent_all(&mut self, peer: usize, ops: &[SendOp]) {
        for op in ops {
            self.sent(peer, op);
        }
    }

    /// Times the request in slot `index`, unless one is being timed.
    #[cold]
    #[inline(never)]
    fn sample(&mut self, index: u32) {
        self.countdown = LATENCY_SAMPLE;
        if self.sampled == u32::MAX {
            self.sampled = index;
            self.sampled_at = self.base.elapsed().as_nanos() as u64;
        }
    }

    /// A receive posted for `peer`, or (`None`) to the shared pool.
    #[inline]
    pub(crate) fn receive_posted(&mut self, peer: Option<usize>) {
        match peer.and_then(|p| self.peers.get_mut(p)) {
            Some(p) => p.ops[RECEIVE] += 1,
            None => self.pool_receives += 1,
        }
    }

    /// A completion about to be routed (`meta`: the slot table, which
    /// names its peer and queue; a stale or foreign one is not counted):
    /// its status, a receive's bytes, a sampled request's latency.
    #[inline]
    pub(crate) fn completed(&mut self, c: &Completion, meta: &[Meta]) {
        let index = c.wr_id as u32;
        let Some(m) = meta.get(index as usize) else {
            return;
        };
        // A stale wr_id (an older epoch of the slot) is not counted.
        if m.epoch != (c.wr_id >> 32) as u32 {
            return;
        }
        let peer = match m.peer {
            crate::slots::ANY_PEER => c.peer.map_or(usize::MAX, |p| p as usize),
            p => p as usize,
        };
        let Some(p) = self.peers.get_mut(peer) else {
            return;
        };
        if c.status.is_success() {
            p.succeeded += 1;
        } else {
            p.completions[(c.status.0 as usize).min(STATUSES - 1)] += 1;
        }
        if m.queue != crate::slots::Queue::Send {
            p.bytes[RECEIVE] += u64::from(c.byte_len);
        }
        if index == self.sampled {
            self.end_sample(peer, c.status.is_success());
        }
    }

    /// The timed request completed.
    #[cold]
    #[inline(never)]
    fn end_sample(&mut self, peer: usize, success: bool) {
        self.sampled = u32::MAX;
        if success && let Some(p) = self.peers.get_mut(peer) {
            let now = self.base.elapsed().as_nanos() as u64;
            record(&mut p.latency, now.saturating_sub(self.sampled_at));
        }
    }

    /// A flush of `peer`'s connection (its queue pair to the error state).
    pub(crate) fn flushed(&mut self, peer: usize) {
        if let Some(p) = self.peers.get_mut(peer) {
            p.flushes += 1;
        }
    }

    /// A reconnect of `peer` begun (its connection renewed).
    pub(crate) fn reconnected(&mut self, peer: usize) {
        if let Some(p) = self.peers.get_mut(peer) {
            p.reconnects += 1;
        }
    }
}

#[cold]
#[inline(never)]
fn make_histogram(h: &mut Option<Box<Histogram<u64>>>) {
    *h = Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGFIG)
        .ok()
        .map(Box::new);
}

/// Records `ns` (fixed bounds: never allocates).
fn record(h: &mut Option<Box<Histogram<u64>>>, ns: u64) {
    if let Some(h) = h {
        h.saturating_record(ns.max(LOWEST_NS));
    }
}
