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
/// measured: a clock read costs more than everything else the engine does
/// for a request (~20 ns), so reading it for each would double the
/// per-request cost. A power of two.
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
    pub(crate) completions: [u64; STATUSES],
    pub(crate) flushes: u64,
    pub(crate) reconnects: u64,
    /// Made on the first sample, so peers without traffic cost no memory.
    pub(crate) latency: Option<Box<Histogram<u64>>>,
}

impl PeerCounters {
    fn new() -> PeerCounters {
        PeerCounters {
            ops: [0; KINDS],
            bytes: [0; KINDS],
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
    /// Signalled requests posted, for the sampling.
    signalled: u32,
    /// Per slot: when its sampled request was posted (ns since `base`,
    /// plus one), 0 if it is not sampled.
    sampled: Vec<u64>,
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
    /// Counters for `peers` peers and an engine of `slots` slots.
    pub(crate) fn new(peers: usize, slots: usize) -> Counters {
        Counters {
            peers: vec![PeerCounters::new(); peers],
            pool_receives: 0,
            signalled: 0,
            sampled: vec![0; slots],
            base: Instant::now(),
        }
    }

    /// A send-queue request the transport took: its kind and bytes (what
    /// a send or write gathers, what a read asks for, an atomic's word),
    /// and, one signalled request in [`LATENCY_SAMPLE`], the time.
    #[inline]
    pub(crate) fn sent(&mut self, peer: usize, op: &SendOp) {
        let Some(p) = self.peers.get_mut(peer) else {
            return;
        };
        let k = kind_index(op.kind);
        let bytes: u64 = op.sges().iter().map(|s| u64::from(s.length())).sum();
        p.ops[k] += 1;
        p.bytes[k] += bytes;
        if op.signaled {
            self.signalled = self.signalled.wrapping_add(1);
            if self.signalled.is_multiple_of(LATENCY_SAMPLE) {
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

    #[cold]
    fn sample(&mut self, index: u32) {
        let at = self.base.elapsed().as_nanos() as u64 + 1;
        if let Some(s) = self.sampled.get_mut(index as usize) {
            *s = at;
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
        let (index, epoch) = (c.wr_id as u32, (c.wr_id >> 32) as u32);
        let Some(m) = meta
            .get(index as usize)
            .filter(|m| m.epoch == epoch && m.state == crate::slots::State::Pending)
        else {
            return;
        };
        let receive = m.queue != crate::slots::Queue::Send;
        let peer = match m.peer {
            crate::slots::ANY_PEER => c.peer.map_or(usize::MAX, |p| p as usize),
            p => p as usize,
        };
        let Some(p) = self.peers.get_mut(peer) else {
            return;
        };
        p.completions[(c.status.0 as usize).min(STATUSES - 1)] += 1;
        if receive {
            p.bytes[RECEIVE] += u64::from(c.byte_len);
        }
        if let Some(at) = self.sampled.get_mut(index as usize)
            && *at != 0
        {
            let posted = std::mem::take(at) - 1;
            if c.status.is_success() {
                let now = self.base.elapsed().as_nanos() as u64;
                record(&mut p.latency, now.saturating_sub(posted));
            }
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
fn record(h: &mut Option<Box<Histogram<u64>>>, ns: u64) {
    if h.is_none() {
        *h = Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGFIG)
            .ok()
            .map(Box::new);
    }
    if let Some(h) = h {
        h.saturating_record(ns.max(LOWEST_NS));
    }
}
