//! A simulated fabric for the barrier engine: ranks in one process, a
//! virtual clock, writes that land after random delays (in posting order
//! per pair of ranks, in any order across pairs), ranks that die at given
//! times, ranks that reset their connections when they leave, connections one side knows broken from the start (as a drain
//! deadline's flush leaves them), and writes to dead or flushed ranks that
//! are lost (with an error completion where the transport detects it, as
//! verbs and UCX tcp do; silently as over UCX shared memory). It logs when
//! each abandon word lands.
//!
//! A write reads its source word when it lands, not when it is posted:
//! as a NIC may, so a write in flight carries whatever its source word
//! holds by then.

use std::collections::VecDeque;
use std::task::Poll;
use std::time::Duration;

use ferrovia_channel::TransportError;

use super::BarrierAlgorithm;
use super::engine::{Fabric, Landed, RankState, Run};
use super::word::RING;
use crate::error::BarrierError;

/// A small deterministic generator (SplitMix64).
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..=max`.
    fn upto(&mut self, max: u64) -> u64 {
        self.next() % (max + 1)
    }
}

/// One barrier call in a rank's script.
#[derive(Debug, Clone)]
pub(super) struct Call {
    /// The barrier's identity in the simulation's log (several ranks'
    /// calls of one barrier share it).
    pub(super) id: usize,
    pub(super) ranks: Vec<usize>,
    pub(super) algorithm: BarrierAlgorithm,
    pub(super) timeout: Duration,
}

/// How the simulated machines behave.
#[derive(Debug, Clone)]
pub(super) struct Config {
    pub(super) world: usize,
    /// When each rank dies, if it does.
    pub(super) deaths: Vec<Option<Duration>>,
    /// `(r, p)`: rank `r` knows its connection to `p` broken from the
    /// start (`p` does not, until a write of its own fails).
    pub(super) broken: Vec<(usize, usize)>,
    /// Writes to dead or flushed ranks fail (and break the connection)
    /// rather than vanish.
    pub(super) detect: bool,
    /// A rank done with its script leaves as a process exits: its peers
    /// learn its connections reset, each after up to `max_delay` (UCX's
    /// Reset, a QP's error), and writes to it fail or vanish as to a dead
    /// rank.
    pub(super) leave_resets: bool,
    /// A write lands 0 to `max_delay` after it is posted (later if an
    /// earlier write of its pair lands later).
    pub(super) max_delay: Duration,
    /// The clock advances 1 µs to `tick` between two turns of the ranks.
    pub(super) tick: Duration,
    pub(super) query_wait: Duration,
    pub(super) seed: u64,
}

/// What one barrier call did.
#[derive(Debug)]
pub(super) struct Record {
    pub(super) rank: usize,
    pub(super) call: usize,
    pub(super) started: Duration,
    pub(super) ended: Duration,
    /// When this call sent its query, if it timed out.
    pub(super) queried: Option<Duration>,
    pub(super) result: Result<(), BarrierError>,
}

/// A whole simulated history.
#[derive(Debug)]
pub(super) struct History {
    pub(super) records: Vec<Record>,
    /// `entered[call id][rank]`: when that rank entered that barrier.
    pub(super) entered: Vec<Vec<Option<Duration>>>,
    /// When each rank finished its script (it stops answering queries).
    pub(super) done: Vec<Option<Duration>>,
    /// Every abandon word that landed, in landing order.
    pub(super) abandons: Vec<Landing>,
}

/// An abandon word landing: `from`'s, in its slot at `to`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Landing {
    pub(super) at: Duration,
    pub(super) from: usize,
    pub(super) to: usize,
    pub(super) word: u64,
    /// When a later word overwrote it in its slot, if one did (a sender
    /// four barriers ahead reuses the slot).
    pub(super) until: Option<Duration>,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Signal(usize),
    Query,
    Answer,
    Reason,
    Abandon(usize),
}

#[derive(Debug)]
struct Msg {
    kind: Kind,
    at: Duration,
    /// The write's id, for signal writes (their completion is tracked).
    write: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteState {
    Pending,
    Done,
    Failed,
}

/// Every rank's memory and connections.
struct World {
    now: Duration,
    n: usize,
    rng: Rng,
    cfg: Config,
    /// `signal[r][from][slot]`, `query[r][from]`, `answer[r][from]`.
    signal: Vec<Vec<[u64; RING]>>,
    query: Vec<Vec<u64>>,
    answer: Vec<Vec<u64>>,
    /// Source words: `signal_src[r][to][slot]`, `answer_src[r][to]`,
    /// `query_src[r]`.
    signal_src: Vec<Vec<[u64; RING]>>,
    answer_src: Vec<Vec<u64>>,
    query_src: Vec<u64>,
    /// `broken[r][p]`: r's connection to p is broken.
    broken: Vec<Vec<bool>>,
    dead: Vec<bool>,
    /// Writes in flight, per lane `from * n + to`, in landing order.
    lanes: Vec<VecDeque<Msg>>,
    /// This barrier's signal writes of each rank: (id, target, state).
    writes: Vec<Vec<(u64, usize, WriteState)>>,
    next_write: u64,
    queried: Vec<Option<Duration>>,
    /// `reason[r][from]`, `reason_src[r][to]`, `abandon_src[r][to][slot]`.
    reason: Vec<Vec<u64>>,
    reason_src: Vec<Vec<u64>>,
    abandon_src: Vec<Vec<[u64; RING]>>,
    abandons: Vec<Landing>,
    /// Resets on their way: at that time, `.1` learns its connection to
    /// `.2` broken.
    resets: Vec<(Duration, usize, usize)>,
}

impl World {
    fn new(cfg: &Config) -> World {
        let n = cfg.world;
        let mut broken = vec![vec![false; n]; n];
        for &(r, p) in &cfg.broken {
            broken[r][p] = true;
        }
        World {
            now: Duration::ZERO,
            n,
            rng: Rng::new(cfg.seed),
            cfg: cfg.clone(),
            signal: vec![vec![[0; RING]; n]; n],
            query: vec![vec![0; n]; n],
            answer: vec![vec![0; n]; n],
            signal_src: vec![vec![[0; RING]; n]; n],
            answer_src: vec![vec![0; n]; n],
            query_src: vec![0; n],
            broken,
            dead: vec![false; n],
            lanes: (0..n * n).map(|_| VecDeque::new()).collect(),
            writes: vec![Vec::new(); n],
            next_write: 0,
            queried: vec![None; n],
            reason: vec![vec![0; n]; n],
            reason_src: vec![vec![0; n]; n],
            abandon_src: vec![vec![[0; RING]; n]; n],
            abandons: Vec::new(),
            resets: Vec::new(),
        }
    }

    /// `r` left: it is gone for writes, and its peers hear of it.
    fn leave(&mut self, r: usize) {
        self.dead[r] = true;
        for p in (0..self.n).filter(|&p| p != r) {
            let delay = self.rng.upto(self.cfg.max_delay.as_micros() as u64);
            self.resets
                .push((self.now + Duration::from_micros(delay), p, r));
        }
    }

    fn post(&mut self, from: usize, to: usize, kind: Kind, write: Option<u64>) {
        let delay = self.rng.upto(self.cfg.max_delay.as_micros() as u64);
        let lane = &mut self.lanes[from * self.n + to];
        let earliest = lane.back().map_or(Duration::ZERO, |m| m.at);
        let at = (self.now + Duration::from_micros(delay)).max(earliest);
        lane.push_back(Msg { kind, at, write });
    }

    fn set_write(&mut self, from: usize, id: u64, state: WriteState) {
        if let Some(w) = self.writes[from].iter_mut().find(|w| w.0 == id) {
            w.2 = state;
        }
    }

    /// Lands every write due by now, and tells every reset due.
    fn deliver(&mut self) {
        let now = self.now;
        for &(_, p, r) in self.resets.iter().filter(|x| x.0 <= now) {
            self.broken[p][r] = true;
        }
        self.resets.retain(|x| x.0 > now);
        for from in 0..self.n {
            for to in 0..self.n {
                while self.lanes[from * self.n + to]
                    .front()
                    .is_some_and(|m| m.at <= self.now)
                {
                    if let Some(m) = self.lanes[from * self.n + to].pop_front() {
                        self.land(from, to, m);
                    }
                }
            }
        }
    }

    fn land(&mut self, from: usize, to: usize, m: Msg) {
        if self.dead[to] || self.broken[to][from] || self.broken[from][to] {
            if self.cfg.detect {
                self.broken[from][to] = true;
                if let Some(id) = m.write {
                    self.set_write(from, id, WriteState::Failed);
                }
            }
            return;
        }
        if let Kind::Signal(slot) | Kind::Abandon(slot) = m.kind {
            let old = self.signal[to][from][slot];
            let now = self.now;
            if let Some(l) = self
                .abandons
                .iter_mut()
                .rev()
                .find(|l| l.from == from && l.to == to && l.word == old && l.until.is_none())
            {
                l.until = Some(now);
            }
        }
        match m.kind {
            Kind::Signal(slot) => self.signal[to][from][slot] = self.signal_src[from][to][slot],
            Kind::Abandon(slot) => {
                let w = self.abandon_src[from][to][slot];
                self.signal[to][from][slot] = w;
                self.abandons.push(Landing {
                    at: self.now,
                    from,
                    to,
                    word: w,
                    until: None,
                });
            }
            Kind::Query => self.query[to][from] = self.query_src[from],
            Kind::Answer => self.answer[to][from] = self.answer_src[from][to],
            Kind::Reason => self.reason[to][from] = self.reason_src[from][to],
        }
        if let Some(id) = m.write {
            self.set_write(from, id, WriteState::Done);
        }
    }
}

/// Rank `me`'s view of the world.
struct View<'w> {
    w: &'w mut World,
    me: usize,
}

impl Fabric for View<'_> {
    fn now(&self) -> Duration {
        self.w.now
    }

    fn signal(&mut self, to: usize, slot: usize, word: u64) -> Result<(), TransportError> {
        let me = self.me;
        if self.w.broken[me][to] {
            return Err(TransportError::Broken { peer: to });
        }
        self.w.signal_src[me][to][slot] = word;
        let id = self.w.next_write;
        self.w.next_write += 1;
        self.w.writes[me].push((id, to, WriteState::Pending));
        self.w.post(me, to, Kind::Signal(slot), Some(id));
        Ok(())
    }

    fn signal_slot(&self, from: usize, slot: usize) -> u64 {
        self.w.signal[self.me][from][slot]
    }

    fn send_query(&mut self, to: usize, id: u64) {
        let me = self.me;
        self.w.query_src[me] = id;
        self.w.queried[me] = Some(self.w.now);
        if !self.w.broken[me][to] {
            self.w.post(me, to, Kind::Query, None);
        }
    }

    fn query_slot(&self, from: usize) -> u64 {
        self.w.query[self.me][from]
    }

    fn send_answer(&mut self, to: usize, word: u64) {
        let me = self.me;
        self.w.answer_src[me][to] = word;
        if !self.w.broken[me][to] {
            self.w.post(me, to, Kind::Answer, None);
        }
    }

    fn answer_slot(&self, from: usize) -> u64 {
        self.w.answer[self.me][from]
    }

    fn abandon(&mut self, to: usize, slot: usize, word: u64, reason: u64) {
        let me = self.me;
        self.w.reason_src[me][to] = reason;
        self.w.abandon_src[me][to][slot] = word;
        if !self.w.broken[me][to] {
            self.w.post(me, to, Kind::Reason, None);
            self.w.post(me, to, Kind::Abandon(slot), None);
        }
    }

    fn reason_slot(&self, from: usize) -> u64 {
        self.w.reason[self.me][from]
    }

    fn is_broken(&self, peer: usize) -> bool {
        self.w.broken[self.me][peer]
    }

    fn give_up(&mut self, peer: usize) {
        let me = self.me;
        self.w.broken[me][peer] = true;
        // Flushed: what was in flight to it never lands.
        let lane = std::mem::take(&mut self.w.lanes[me * self.w.n + peer]);
        for m in lane {
            if let Some(id) = m.write {
                self.w.set_write(me, id, WriteState::Failed);
            }
        }
    }

    fn progress(&mut self) -> Result<(), TransportError> {
        Ok(())
    }

    fn landed(&mut self) -> Landed {
        let ws = &self.w.writes[self.me];
        if let Some(w) = ws.iter().find(|w| w.2 == WriteState::Failed) {
            return Landed::Failed(w.1);
        }
        match ws.iter().find(|w| w.2 == WriteState::Pending) {
            Some(w) => Landed::Waiting(w.1),
            None => Landed::All,
        }
    }
}

/// Runs each rank's script (`scripts[r]`, in order) until every rank has
/// finished it or died. Panics if that takes longer than the scripts'
/// timeouts allow.
pub(super) fn simulate(cfg: &Config, scripts: &[Vec<Call>]) -> History {
    let n = cfg.world;
    let calls = scripts
        .iter()
        .flatten()
        .map(|c| c.id + 1)
        .max()
        .unwrap_or(0);
    let mut history = History {
        records: Vec::new(),
        entered: vec![vec![None; n]; calls],
        done: vec![None; n],
        abandons: Vec::new(),
    };
    // Each barrier ends by its timeout, the query window and a tick or two.
    let limit: Duration = scripts
        .iter()
        .map(|s| {
            s.iter()
                .map(|c| c.timeout + cfg.query_wait + 3 * cfg.tick)
                .sum::<Duration>()
        })
        .max()
        .unwrap_or_default()
        + cfg.tick;
    let mut world = World::new(cfg);
    let mut order_rng = Rng::new(cfg.seed ^ 0x5eed);
    let mut states: Vec<RankState> = (0..n).map(|r| RankState::new(r, n)).collect();
    let mut runs: Vec<Option<(usize, Run)>> = (0..n).map(|_| None).collect();
    let mut next = vec![0usize; n];
    loop {
        let finished = |r: usize| world.dead[r] || history.done[r].is_some();
        if (0..n).all(finished) {
            history.abandons = std::mem::take(&mut world.abandons);
            return history;
        }
        assert!(world.now <= limit, "the simulation ran past {limit:?}");
        let step = 1 + world.rng.upto(cfg.tick.as_micros() as u64 - 1);
        world.now += Duration::from_micros(step);
        for (r, run) in runs.iter_mut().enumerate() {
            if !world.dead[r] && cfg.deaths[r].is_some_and(|t| t <= world.now) {
                world.dead[r] = true;
                *run = None;
            }
        }
        world.deliver();
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            order.swap(i, order_rng.upto(i as u64) as usize);
        }
        for r in order {
            if world.dead[r] || history.done[r].is_some() {
                continue;
            }
            // Enter barriers and poll until one waits (or the script ends).
            loop {
                if runs[r].is_none() {
                    let Some(call) = scripts[r].get(next[r]) else {
                        history.done[r] = Some(world.now);
                        if cfg.leave_resets {
                            world.leave(r);
                        }
                        break;
                    };
                    next[r] += 1;
                    let at = call.ranks.iter().position(|&p| p == r).unwrap_or(0);
                    world.writes[r].clear();
                    world.queried[r] = None;
                    history.entered[call.id][r] = Some(world.now);
                    let run = Run::enter(
                        &mut states[r],
                        world.now,
                        &call.ranks,
                        at,
                        call.algorithm,
                        call.timeout,
                        cfg.query_wait,
                    );
                    runs[r] = Some((next[r] - 1, run));
                }
                let Some((i, run)) = runs[r].as_mut() else {
                    break;
                };
                let mut view = View {
                    w: &mut world,
                    me: r,
                };
                match run.poll(&mut states[r], &mut view, true) {
                    Poll::Pending => break,
                    Poll::Ready(result) => {
                        let call = &scripts[r][*i];
                        history.records.push(Record {
                            rank: r,
                            call: call.id,
                            started: history.entered[call.id][r].unwrap_or_default(),
                            ended: world.now,
                            queried: world.queried[r],
                            result,
                        });
                        runs[r] = None;
                    }
                }
            }
        }
    }
}
