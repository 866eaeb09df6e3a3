//! The barrier as a state machine over a [`Fabric`]: the same code runs
//! over RDMA writes (`node_fabric`) and over the simulated fabric of the
//! property tests (`sim`).

use std::task::Poll;
use std::time::Duration;

use ferrovia_channel::TransportError;

use super::BarrierAlgorithm;
use super::schedule::{Schedule, Step};
use super::word::{self, Seen};

mod abandon;
use crate::error::BarrierError;

/// What a barrier needs from the machines: one-sided writes of words into
/// peers' sync regions, loads of its own, a clock and peer health. Writes
/// to one peer land in posting order; nothing else is ordered.
pub(crate) trait Fabric {
    /// Time since an origin of the fabric's choosing.
    fn now(&self) -> Duration;
    /// Writes `word` into signal slot `slot` of this rank at `to`, and
    /// keeps track of the write for [`Fabric::landed`].
    fn signal(&mut self, to: usize, slot: usize, word: u64) -> Result<(), TransportError>;
    /// The word `from` last wrote into its signal slot `slot` here.
    fn signal_slot(&self, from: usize, slot: usize) -> u64;
    /// Writes query number `id` into this rank's query slot at `to`
    /// (best effort).
    fn send_query(&mut self, to: usize, id: u64);
    /// The last query `from` wrote here (0: none).
    fn query_slot(&self, from: usize) -> u64;
    /// Writes `word` into this rank's answer slot at `to` (best effort).
    fn send_answer(&mut self, to: usize, word: u64);
    /// The last answer `from` wrote here (0: none).
    fn answer_slot(&self, from: usize) -> u64;
    /// Tells `to` this rank abandoned the barrier (best effort, not
    /// tracked by [`Fabric::landed`]): writes `reason` into this rank's
    /// reason slot at `to`, then `word` into its signal slot `slot` there,
    /// so the reason lands first.
    fn abandon(&mut self, to: usize, slot: usize, word: u64, reason: u64);
    /// The last reason `from` wrote here (0: none).
    fn reason_slot(&self, from: usize) -> u64;
    /// Whether the connection to `peer` is known broken.
    fn is_broken(&self, peer: usize) -> bool;
    /// Stops all work towards `peer` (it is gone): marks it broken.
    fn give_up(&mut self, peer: usize);
    /// Reaps completions.
    fn progress(&mut self) -> Result<(), TransportError>;
    /// Whether this barrier's signal writes have completed.
    fn landed(&mut self) -> Landed;
}

/// The state of a barrier's signal writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Landed {
    /// Every one completed.
    All,
    /// The one to this rank has not completed yet.
    Waiting(usize),
    /// The one to this rank failed.
    Failed(usize),
}

/// A rank's barrier state, kept from one barrier to the next.
#[derive(Debug)]
pub(crate) struct RankState {
    me: usize,
    /// For each peer, how many barriers listing both this rank and it this
    /// rank has entered (the pair count).
    pairs: Vec<u64>,
    /// The last query of each rank this one answered.
    answered: Vec<u64>,
    /// The last query this rank sent.
    query: u64,
}

impl RankState {
    pub(crate) fn new(me: usize, world_size: usize) -> RankState {
        RankState {
            me,
            pairs: vec![0; world_size],
            answered: vec![0; world_size],
            query: 0,
        }
    }

    /// Forgets `peer`: a new member took its rank, whose counts start at 0.
    pub(crate) fn reset_peer(&mut self, peer: usize) {
        if let (Some(p), Some(a)) = (self.pairs.get_mut(peer), self.answered.get_mut(peer)) {
            *p = 0;
            *a = 0;
        }
    }

    /// The pair count with `peer`.
    pub(crate) fn pair_count(&self, peer: usize) -> u64 {
        self.pairs.get(peer).copied().unwrap_or(0)
    }

    /// Answers every query it has not answered yet with its pair count with
    /// the querier.
    pub(crate) fn answer_queries(&mut self, f: &mut impl Fabric) {
        for r in (0..self.pairs.len()).filter(|&r| r != self.me) {
            let q = f.query_slot(r);
            if q != 0 && q != self.answered[r] {
                self.answered[r] = q;
                f.send_answer(r, word::answer(q, self.pairs[r]));
            }
        }
    }
}

/// What a running barrier waits for.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Entered: check no listed peer was known unreachable before.
    Check,
    /// At step `i` of the schedule.
    Steps(usize),
    /// Every step done: waiting for this barrier's writes to complete.
    Landing,
    /// Gave up waiting on `waited_on` (timeout, or a listed peer's
    /// connection broke): query `id` is out until `until`.
    Querying {
        id: u64,
        until: Duration,
        waited_on: usize,
    },
}

/// One barrier, from entry to its result.
#[derive(Debug)]
pub(crate) struct Run {
    /// Owned, so a run can outlive the caller's list (an async barrier
    /// keeps it across polls).
    peers: Vec<usize>,
    schedule: Schedule,
    fp: u64,
    started: Duration,
    deadline: Duration,
    query_wait: Duration,
    phase: Phase,
    /// Whether the barrier returned its result or was cancelled: the
    /// others are told at most once, and never after it passed.
    over: bool,
    /// The waited-on peer whose break was seen, its slot not yet looked
    /// at again since.
    break_seen: Option<usize>,
}

impl Run {
    /// Enters a barrier among `peers` (sorted, with this rank at position
    /// `at`) at time `now`: counts it for every pair it lists, whatever
    /// happens next.
    pub(crate) fn enter(
        st: &mut RankState,
        now: Duration,
        peers: &[usize],
        at: usize,
        algorithm: BarrierAlgorithm,
        timeout: Duration,
        query_wait: Duration,
    ) -> Run {
        for &p in peers.iter().filter(|&&p| p != st.me) {
            if let Some(c) = st.pairs.get_mut(p) {
                *c += 1;
            }
        }
        Run {
            peers: peers.to_vec(),
            schedule: Schedule::new(algorithm, peers.len(), at),
            fp: word::fingerprint(peers, algorithm),
            started: now,
            deadline: now.saturating_add(timeout),
            query_wait,
            phase: Phase::Check,
            over: false,
            break_seen: None,
        }
    }

    fn others(&self, me: usize) -> impl Iterator<Item = usize> + '_ {
        self.peers.iter().copied().filter(move |&p| p != me)
    }

    fn after(&self, f: &impl Fabric) -> Duration {
        f.now().saturating_sub(self.started)
    }

    /// Advances as far as it can without waiting. `slow`: also answer
    /// queries, reap completions, check peer health and listen for peers
    /// that abandoned (the caller does this every so often while
    /// spinning). A failure is told to every listed peer still reachable.
    pub(crate) fn poll(
        &mut self,
        st: &mut RankState,
        f: &mut impl Fabric,
        slow: bool,
    ) -> Poll<Result<(), BarrierError>> {
        let result = self.advance(st, f, slow);
        if let Poll::Ready(r) = &result
            && !self.over
        {
            self.over = true;
            if let Err(e) = r {
                let (origin, cause) = abandon::blame(st.me, e, |p| f.is_broken(p));
                self.abandon(st, f, origin, cause);
            }
        }
        result
    }

    fn advance(
        &mut self,
        st: &mut RankState,
        f: &mut impl Fabric,
        slow: bool,
    ) -> Poll<Result<(), BarrierError>> {
        loop {
            match self.phase {
                Phase::Check => {
                    if let Some(e) = self.unreachable(st, f) {
                        return Poll::Ready(Err(e));
                    }
                    self.phase = Phase::Steps(0);
                }
                Phase::Steps(i) => match self.schedule.step(i) {
                    None => self.phase = Phase::Landing,
                    Some(Step::Signal(j)) => {
                        let p = self.peers[j];
                        let k = st.pair_count(p);
                        match f.signal(p, word::slot(k), word::signal(k, self.fp)) {
                            Ok(()) => self.phase = Phase::Steps(i + 1),
                            // Broke since the barrier began.
                            Err(TransportError::Broken { .. }) => return self.ask(st, f, p),
                            Err(e) => return Poll::Ready(Err(e.into())),
                        }
                    }
                    Some(Step::Wait(j)) => {
                        let p = self.peers[j];
                        let k = st.pair_count(p);
                        match word::classify(f.signal_slot(p, word::slot(k)), k, self.fp) {
                            Seen::Match => self.phase = Phase::Steps(i + 1),
                            Seen::Pending => return self.pending(st, f, slow, p),
                            Seen::Abandoned => {
                                return Poll::Ready(Err(self.abandoned_by(st, f, p)));
                            }
                            Seen::Ahead => {
                                return Poll::Ready(Err(BarrierError::Incomplete {
                                    rank: p,
                                    after: self.after(f),
                                }));
                            }
                            Seen::Mismatch => {
                                return Poll::Ready(Err(BarrierError::Mismatch {
                                    rank: p,
                                    count: k,
                                    after: self.after(f),
                                }));
                            }
                        }
                    }
                },
                Phase::Landing => return self.landing(st, f, slow),
                Phase::Querying {
                    id,
                    until,
                    waited_on,
                } => {
                    if slow {
                        st.answer_queries(f);
                        let _ = f.progress();
                    }
                    if f.now() < until {
                        return Poll::Pending;
                    }
                    return Poll::Ready(Err(self.verdict(st, f, id, waited_on)));
                }
            }
        }
    }

    /// Not there yet, waiting on `waited_on`: past the deadline, or once
    /// its connection breaks, ask who arrived.
    fn pending(
        &mut self,
        st: &mut RankState,
        f: &mut impl Fabric,
        slow: bool,
        waited_on: usize,
    ) -> Poll<Result<(), BarrierError>> {
        if slow && let Some(e) = self.heard(st, f) {
            return Poll::Ready(Err(e));
        }
        if f.now() >= self.deadline {
            return self.ask(st, f, waited_on);
        }
        if slow {
            st.answer_queries(f);
            if let Err(e) = f.progress() {
                return Poll::Ready(Err(e.into()));
            }
            // Only the peer waited on: a listed peer done with its part
            // here (its signals taken, none owed to it) may pass this
            // barrier, exit and reset its connections before another's
            // signal reaches this rank; a peer further on is looked at when
            // its step comes, and one that cannot go on abandons, which
            // `heard` sees.
            if f.is_broken(waited_on) {
                // One more look first: the peer's signal lands before its
                // connection's end, but both may have come between this
                // poll's look and now (UCX's progress thread lands writes
                // at any time). In Landing the next look is `landing`,
                // which passes on a broken peer.
                if self.break_seen != Some(waited_on) {
                    self.break_seen = Some(waited_on);
                    return Poll::Pending;
                }
                return self.ask(st, f, waited_on);
            }
        }
        Poll::Pending
    }

    /// Every step done, so every listed rank entered this barrier (each
    /// wait matched its signal): what is left is this rank's own signal
    /// writes. A write that failed, or waits on a peer whose connection
    /// broke, passes: a peer that took the signal may leave before the
    /// write's acknowledgment comes back (over UCX the acknowledgment is
    /// software, and a peer done with its last barrier exits and flushes),
    /// and asking would only find it gone. One to a sound peer is waited
    /// for as a signal is.
    fn landing(
        &mut self,
        st: &mut RankState,
        f: &mut impl Fabric,
        slow: bool,
    ) -> Poll<Result<(), BarrierError>> {
        match f.landed() {
            Landed::All => Poll::Ready(Ok(())),
            Landed::Failed(to) => {
                tracing::debug!(
                    "barrier passed; its signal write to rank {to} failed (its connection ended)"
                );
                Poll::Ready(Ok(()))
            }
            Landed::Waiting(to) if f.is_broken(to) => {
                tracing::debug!(
                    "barrier passed; its signal write to rank {to} is flushed (its connection broke)"
                );
                Poll::Ready(Ok(()))
            }
            Landed::Waiting(to) => self.pending(st, f, slow, to),
        }
    }

    /// Sends a query to every listed peer; the verdict comes after the
    /// query window. A peer that abandoned the barrier already said what
    /// the query would find: fail at once.
    fn ask(
        &mut self,
        st: &mut RankState,
        f: &mut impl Fabric,
        waited_on: usize,
    ) -> Poll<Result<(), BarrierError>> {
        if let Some(e) = self.heard(st, f) {
            return Poll::Ready(Err(e));
        }
        st.query = word::next_query(st.query);
        let id = st.query;
        for p in self.others(st.me) {
            f.send_query(p, id);
        }
        self.phase = Phase::Querying {
            id,
            until: f.now().saturating_add(self.query_wait),
            waited_on,
        };
        Poll::Pending
    }

    /// The listed peers whose connection is known broken on entry, as an
    /// error.
    fn unreachable(&self, st: &RankState, f: &impl Fabric) -> Option<BarrierError> {
        let missing: Vec<usize> = self.others(st.me).filter(|&p| f.is_broken(p)).collect();
        (!missing.is_empty()).then(|| BarrierError::Unreachable {
            missing,
            after: self.after(f),
        })
    }

    /// After the query window: a peer arrived if it answered with a pair
    /// count at least this rank's (it entered this barrier, or a later
    /// one with this rank). Those that did not answer are given up on.
    fn verdict(
        &self,
        st: &RankState,
        f: &mut impl Fabric,
        id: u64,
        waited_on: usize,
    ) -> BarrierError {
        let after = self.after(f);
        let mut missing = Vec::new();
        for p in self.others(st.me) {
            match word::answer_count(f.answer_slot(p), id) {
                Some(c) if word::reached(c, st.pair_count(p)) => {}
                Some(_) => missing.push(p),
                None => {
                    missing.push(p);
                    if !f.is_broken(p) {
                        f.give_up(p);
                    }
                }
            }
        }
        if missing.is_empty() {
            tracing::warn!(
                "barrier failed after {after:?}: every rank arrived, rank {waited_on} did not complete"
            );
            BarrierError::Incomplete {
                rank: waited_on,
                after,
            }
        } else {
            tracing::warn!("barrier failed after {after:?}: rank(s) {missing:?} did not arrive");
            BarrierError::Timeout { missing, after }
        }
    }
}
