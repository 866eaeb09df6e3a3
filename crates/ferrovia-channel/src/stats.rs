//! Snapshots of what an engine did, per peer: [`ChannelStats`], from
//! [`ChannelCore::stats`] (and `stats()` on every type built on a core:
//! `Channel`, `MultiChannel`, the node, the async and transfer layers).

use std::time::Duration;

use ferrovia_types::WcStatus;
use hdrhistogram::Histogram;

use crate::core::ChannelCore;
use crate::counters::{self, ATOMIC, PeerCounters, READ, RECEIVE, SEND, STATUSES, WRITE};

/// Counts by kind of operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpCounts {
    /// Sends.
    pub send: u64,
    /// RDMA writes (with or without immediate data).
    pub write: u64,
    /// RDMA reads.
    pub read: u64,
    /// Remote atomics (fetch-and-add, compare-and-swap).
    pub atomic: u64,
    /// Receives.
    pub receive: u64,
}

impl OpCounts {
    fn from_array(a: &[u64; counters::KINDS]) -> OpCounts {
        OpCounts {
            send: a[SEND],
            write: a[WRITE],
            read: a[READ],
            atomic: a[ATOMIC],
            receive: a[RECEIVE],
        }
    }

    /// Every kind, with its name (`send`, `write`, `read`, `atomic`,
    /// `receive`).
    pub fn by_kind(&self) -> [(&'static str, u64); 5] {
        [
            ("send", self.send),
            ("write", self.write),
            ("read", self.read),
            ("atomic", self.atomic),
            ("receive", self.receive),
        ]
    }

    /// All kinds together.
    pub fn total(&self) -> u64 {
        self.by_kind().iter().map(|(_, n)| n).sum()
    }
}

/// Latencies of signalled requests, from the post to the completion's
/// routing, as a histogram (two significant digits, 10 ns to 100 s).
/// Sampled: one signalled send-queue request in 64 is timed (one at a
/// time: while one is in flight, the next due is skipped), since a clock
/// read costs more than the rest of a request's bookkeeping.
#[derive(Clone, Default)]
pub struct LatencyHistogram(Option<Box<Histogram<u64>>>);

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("samples", &self.samples())
            .field("p50", &self.quantile(0.5))
            .field("max", &self.max())
            .finish()
    }
}

impl PartialEq for LatencyHistogram {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => a == b,
            (a, b) => a.is_none() && b.is_none(),
        }
    }
}

impl LatencyHistogram {
    /// How many requests were timed.
    pub fn samples(&self) -> u64 {
        self.0.as_ref().map_or(0, |h| h.len())
    }

    /// The latency below which the share `q` (0.0 to 1.0) of the samples
    /// fall; `None` without samples.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let h = self.0.as_ref().filter(|h| !h.is_empty())?;
        Some(Duration::from_nanos(h.value_at_quantile(q.clamp(0.0, 1.0))))
    }

    /// The smallest sample.
    pub fn min(&self) -> Option<Duration> {
        let h = self.0.as_ref().filter(|h| !h.is_empty())?;
        Some(Duration::from_nanos(h.min()))
    }

    /// The largest sample.
    pub fn max(&self) -> Option<Duration> {
        let h = self.0.as_ref().filter(|h| !h.is_empty())?;
        Some(Duration::from_nanos(h.max()))
    }

    /// The mean of the samples.
    pub fn mean(&self) -> Option<Duration> {
        let h = self.0.as_ref().filter(|h| !h.is_empty())?;
        Some(Duration::from_nanos(h.mean() as u64))
    }

    /// Adds `other`'s samples (peers or rails summed up).
    pub fn merge(&mut self, other: &LatencyHistogram) {
        match (&mut self.0, &other.0) {
            (_, None) => {}
            (None, Some(b)) => self.0 = Some(b.clone()),
            (Some(a), Some(b)) => {
                // Same bounds on both sides: cannot fail.
                let _ = a.add(&**b);
            }
        }
    }
}

/// What an engine did with one peer.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct PeerStats {
    /// The peer (of the engine; on rails, within its rail).
    pub peer: usize,
    /// Requests posted, by kind. Receives posted to the shared pool are
    /// not here (their sender is unknown until they complete): see
    /// [`ChannelStats::pool_receives`].
    pub ops: OpCounts,
    /// Bytes by kind: what sends and writes gather, what reads ask for,
    /// 8 per atomic (at posting), and what arrived in receives from this
    /// peer, the shared pool's included (at completion).
    pub bytes: OpCounts,
    /// Completions reported, by status (only statuses seen). Unsignalled
    /// requests complete without one of their own.
    pub completions: Vec<(WcStatus, u64)>,
    /// Times its connection was flushed (moved to the error state).
    pub flushes: u64,
    /// Times its connection was renewed (a reconnect's first half).
    pub reconnects: u64,
    /// Revocations of registrations this peer had fetched a key of (over
    /// UCX; verbs needs none: 0).
    pub revocations: u64,
    /// Requests posted and not yet reported.
    pub outstanding: u64,
    /// Latencies of a sample of signalled requests.
    pub latency: LatencyHistogram,
}

impl PeerStats {
    /// Completions with `status`.
    pub fn completed(&self, status: WcStatus) -> u64 {
        self.completions
            .iter()
            .find(|(s, _)| *s == status)
            .map_or(0, |(_, n)| *n)
    }

    /// Completions with any status but success.
    pub fn failed(&self) -> u64 {
        self.completions
            .iter()
            .filter(|(s, _)| !s.is_success())
            .map(|(_, n)| n)
            .sum()
    }

    fn of(peer: usize, c: &PeerCounters, outstanding: u64, revocations: u64) -> PeerStats {
        PeerStats {
            peer,
            ops: OpCounts::from_array(&c.ops),
            bytes: OpCounts::from_array(&c.bytes),
            completions: (c.succeeded > 0)
                .then_some((WcStatus::SUCCESS, c.succeeded))
                .into_iter()
                .chain(
                    (1..STATUSES)
                        .filter(|&s| c.completions[s] > 0)
                        .map(|s| (WcStatus(s as u32), c.completions[s])),
                )
                .collect(),
            flushes: c.flushes,
            reconnects: c.reconnects,
            revocations,
            outstanding,
            latency: LatencyHistogram(c.latency.clone()),
        }
    }
}

/// What an engine did, per peer (index = peer), at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ChannelStats {
    /// Per peer.
    pub peers: Vec<PeerStats>,
    /// Receives posted to the shared pool.
    pub pool_receives: u64,
}

impl ChannelStats {
    /// Per rail, for an engine over [`Rails`](crate::Rails) (`rails` of
    /// them): peer `rail * peers_per_rail + p` of the whole is peer `p` of
    /// rail `rail`.
    pub fn by_rail(&self, rails: usize) -> Vec<ChannelStats> {
        let per = self.peers.len() / rails.max(1);
        (0..rails)
            .map(|r| ChannelStats {
                peers: self.peers[r * per..(r + 1) * per]
                    .iter()
                    .cloned()
                    .enumerate()
                    .map(|(p, mut s)| {
                        s.peer = p;
                        s
                    })
                    .collect(),
                pool_receives: 0,
            })
            .collect()
    }
}

impl ChannelCore {
    /// Counts a reconnect of `peer` (its connection renewed).
    pub(crate) fn note_reconnect(&self, peer: usize) {
        self.state().counters.reconnected(peer);
    }

    /// What this engine did, per peer, until now (see [`ChannelStats`]).
    /// Counting costs a few nanoseconds per request; the snapshot copies
    /// the counters (and the latency histogram, ~25 KiB, of each peer
    /// that had a request).
    pub fn stats(&self) -> ChannelStats {
        let st = self.state();
        let slots = &st.slots;
        let c = &st.counters;
        ChannelStats {
            peers: c
                .peers
                .iter()
                .enumerate()
                .map(|(p, pc)| {
                    let outstanding =
                        u64::from(slots.outstanding_send[p]) + u64::from(slots.outstanding_recv[p]);
                    PeerStats::of(p, pc, outstanding, self.transport.revocations(p))
                })
                .collect(),
            pool_receives: c.pool_receives,
        }
    }
}
