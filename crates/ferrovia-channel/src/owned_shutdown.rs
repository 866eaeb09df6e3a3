//! When the owner of owned requests goes away (the engine drops, or an
//! async layer shuts down): what it flushes at once, what it waits for.
//!
//! Receives and reads whose owner is gone have nobody to hand their bytes
//! to, and may never complete (a receive waits for a message that may not
//! come): their peers are flushed at once, which reports them within
//! milliseconds. Sends, writes and atomics carry something to the peer, so
//! an owner going away waits for them, bounded by the drain deadline, and
//! flushes whatever is left; a peer with both kinds outstanding is flushed
//! only then. The engine keeps every buffer until its request is
//! reported, and leaks (never frees) the buffer of one never reported.

use std::time::{Duration, Instant};

use crate::core::ChannelCore;
use crate::slots::{Queue, Slots, State};

/// What a flush of an owner going away flushed
/// ([`ChannelCore::flush_inbound`], [`ChannelCore::flush_remaining`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Flushed {
    /// The peers whose connections were flushed, ascending: posting to
    /// them fails with `Broken` until they are reconnected.
    pub peers: Vec<usize>,
    /// Receives and reads that were outstanding towards them.
    pub inbound: usize,
    /// Sends, writes and atomics that were outstanding towards them
    /// (whether each reached the peer is unknown).
    pub outbound: usize,
    /// Receives the shared pool held when it was flushed (0: it was not).
    pub pool: usize,
    /// Whether the pool was stopped silently (verbs: a shared receive
    /// queue's receives are never reported; every connection is then in
    /// the error state). Its receives' buffers come back when the engine
    /// drops, once the completion stream has gone quiet.
    pub pool_silent: bool,
}

impl Flushed {
    /// Adds what `other` flushed.
    pub fn merge(&mut self, other: Flushed) {
        for p in other.peers {
            if let Err(at) = self.peers.binary_search(&p) {
                self.peers.insert(at, p);
            }
        }
        self.inbound += other.inbound;
        self.outbound += other.outbound;
        self.pool += other.pool;
        self.pool_silent |= other.pool_silent;
    }

    /// Whether nothing was flushed.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty() && self.pool == 0
    }
}

impl ChannelCore {
    /// Sends, writes and atomics posted and not yet reported (a scope's
    /// send-queue requests count too: their kind is not recorded).
    pub fn outbound_outstanding(&self) -> usize {
        self.state()
            .slots
            .pending_work()
            .iter()
            .map(|w| w.outbound)
            .sum()
    }

    /// Requests posted whose report the transport still owes: those
    /// outstanding, less the shared pool's receives after a silent pool
    /// flush (see [`Flushed::pool_silent`]).
    pub fn awaiting_reports(&self) -> usize {
        let st = self.state();
        let silent = if st.shared_broken {
            st.slots.outstanding_shared as usize
        } else {
            0
        };
        st.slots.pending() - silent
    }

    /// Flushes at once what an owner going away has no use for: every
    /// peer whose outstanding requests are all receives and reads, and the
    /// shared pool's receives if no send, write or atomic is outstanding
    /// anywhere (a silent pool flush stops every connection). The flushed
    /// requests are reported by the next polls, with a flush status if
    /// nothing arrived; peers with a send, write or atomic outstanding are
    /// left alone.
    pub fn flush_inbound(&self) -> Flushed {
        let work = self.state().slots.pending_work();
        let mut out = Flushed::default();
        for w in work.iter().filter(|w| w.outbound == 0) {
            self.flush_for_owner(w.peer);
            out.peers.push(w.peer);
            out.inbound += w.inbound;
        }
        if work.iter().all(|w| w.outbound == 0) {
            self.flush_pool_for_owner(&mut out);
        }
        out
    }

    /// Flushes every peer with anything outstanding that `already` (an
    /// earlier [`ChannelCore::flush_inbound`]) did not flush, and the
    /// shared pool's receives unless it did: what an owner going away does
    /// once its sends, writes and atomics had their time.
    pub fn flush_remaining(&self, already: &Flushed) -> Flushed {
        let work = self.state().slots.pending_work();
        let mut out = Flushed::default();
        for w in work.iter().filter(|w| !already.peers.contains(&w.peer)) {
            self.flush_for_owner(w.peer);
            out.peers.push(w.peer);
            out.inbound += w.inbound;
            out.outbound += w.outbound;
        }
        if already.pool == 0 {
            self.flush_pool_for_owner(&mut out);
        }
        out
    }

    fn flush_for_owner(&self, peer: usize) {
        let mut st = self.state();
        st.broken[peer] = true;
        st.counters.flushed(peer);
        drop(st);
        if let Err(e) = self.transport.flush(peer) {
            // Its requests then stay outstanding: kept, and leaked at drop.
            tracing::error!("flushing peer {peer}: {e}");
        }
    }

    fn flush_pool_for_owner(&self, out: &mut Flushed) {
        let (held, stopped) = {
            let st = self.state();
            (st.slots.outstanding_shared as usize, st.shared_broken)
        };
        if held == 0 || stopped {
            return;
        }
        match self.stop_pool() {
            Ok(silent) => {
                out.pool = held;
                out.pool_silent = silent;
            }
            Err(e) => tracing::error!("flushing the shared receive pool: {e}"),
        }
    }

    /// At drop: flushes receives and reads at once, waits for sends,
    /// writes and atomics up to the drain deadline, flushes what is left,
    /// and leaks the buffers of any request never reported (a scope
    /// always leaves none of its own).
    fn settle_owned(&self) {
        let start = Instant::now();
        let first = self.flush_inbound();
        if !first.is_empty() {
            tracing::debug!(
                "engine dropped: flushed {} receive(s) and read(s) of peer(s) {:?} and {} pooled receive(s) at once",
                first.inbound,
                first.peers,
                first.pool
            );
        }
        let deadline = self.cfg.drain_deadline;
        while self.outbound_outstanding() > 0 {
            let left = deadline.saturating_sub(start.elapsed());
            if left.is_zero() || self.wait_progress(left).is_err() {
                break;
            }
        }
        if self.outstanding() > 0 {
            let rest = self.flush_remaining(&first);
            if rest.outbound > 0 {
                tracing::warn!(
                    "engine dropped with {} send(s), write(s) or atomic(s) outstanding after {deadline:?}: flushed peer(s) {:?}",
                    rest.outbound,
                    rest.peers
                );
            }
        }
        let start = Instant::now();
        while self.awaiting_reports() > 0 && start.elapsed() < FLUSH_GRACE {
            if self.wait_progress(FLUSH_GRACE).is_err() {
                break;
            }
        }
        let silent_pool = {
            let st = self.state();
            st.shared_broken && st.slots.outstanding_shared > 0
        };
        if silent_pool && self.awaiting_reports() == 0 {
            self.release_silent_pool(Some(FLUSH_GRACE));
        }
        if self.outstanding() > 0 {
            tracing::error!(
                "{} request(s) never reported after their flush: leaking their buffers rather than freeing them under DMA",
                self.outstanding()
            );
            self.state().slots.owned.leak_all();
        }
    }
}

/// What one peer has pending ([`Slots::pending_work`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerWork {
    pub(crate) peer: usize,
    pub(crate) inbound: usize,
    pub(crate) outbound: usize,
}

impl Slots {
    /// Per peer with requests pending (the pool's aside): how many are
    /// inbound (receives, reads) and how many outbound (sends, writes,
    /// atomics; a scoped send-queue request counts as outbound, its kind
    /// unrecorded), ascending by peer.
    pub(crate) fn pending_work(&self) -> Vec<PeerWork> {
        let mut out: Vec<PeerWork> = Vec::new();
        for (i, m) in self.meta.iter().enumerate() {
            if m.state != State::Pending || m.queue == Queue::Shared {
                continue;
            }
            let outbound = if m.owned {
                self.owned.is_outbound(i as u32)
            } else {
                m.queue == Queue::Send
            };
            let peer = m.peer as usize;
            let at = match out.binary_search_by_key(&peer, |w| w.peer) {
                Ok(at) => at,
                Err(at) => {
                    out.insert(
                        at,
                        PeerWork {
                            peer,
                            inbound: 0,
                            outbound: 0,
                        },
                    );
                    at
                }
            };
            if outbound {
                out[at].outbound += 1;
            } else {
                out[at].inbound += 1;
            }
        }
        out
    }
}

/// How long flushed owned requests may take to report back at drop before
/// their buffers are leaked (nothing needs them back: unlike a scope's,
/// an owned request ends no borrow). Verbs and UCX over tcp report
/// flushed work within milliseconds; UCX 1.13's shared memory may never
/// report a send stuck towards a dead peer.
const FLUSH_GRACE: Duration = Duration::from_secs(2);

impl Drop for ChannelCore {
    fn drop(&mut self) {
        if self.outstanding() > 0 {
            self.settle_owned();
        }
    }
}
