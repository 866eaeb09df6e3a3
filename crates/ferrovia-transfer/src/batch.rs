//! One batch in flight, whichever form holds it (a scope's borrow or an
//! owned lease): posting its runs over the rails the policy picks,
//! following their tickets, moving a lost rail's runs to another, and
//! sending the notification once every run has completed.

use std::time::{Duration, Instant};

use ferrovia_channel::engine::ChannelCore;
use ferrovia_channel::transport::OpKind;
use ferrovia_channel::{Lease, PieceError, PieceState, PieceTicket, TransportError};
use ferrovia_types::{CompletionError, WcClass, WcStatus};

use crate::error::TransferError;
use crate::notify::NOTIFY_MAX;
use crate::prepare::{PreparedList, RunState};
use crate::state::EngineState;

/// The most rails an engine drives.
pub const MAX_RAILS: usize = 8;

/// What a batch does with its entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// RDMA writes: local bytes to the peers' segments.
    Write,
    /// RDMA reads: the peers' segments into local bytes.
    Read,
}

impl Op {
    fn kind(self) -> OpKind {
        match self {
            Op::Write => OpKind::Write,
            Op::Read => OpKind::Read,
        }
    }
}

/// How a batch ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Report {
    /// Its id on this rank (what a notification names).
    pub batch: u64,
    /// Entries and bytes it moved.
    pub entries: usize,
    /// Bytes.
    pub bytes: u64,
    /// Runs posted, retries included.
    pub runs: usize,
    /// Runs posted again on another rail after theirs failed.
    pub retried: usize,
    /// (rail, peer) connections lost during the batch.
    pub rails_lost: Vec<(usize, usize)>,
    /// Bytes each rail carried (rails beyond the engine's are 0).
    pub bytes_per_rail: [u64; MAX_RAILS],
    /// From submission to the last completion (and notification).
    pub elapsed: Duration,
    /// Peers notified.
    pub notified: usize,
}

/// How runs are posted: under a scope's borrowed lease, or an owned one.
/// Each knows the prepared list whose pieces it posts.
pub(crate) trait Poster {
    fn core(&self) -> &ChannelCore;
    /// Posts the pieces `range` of `vpeer` of the list's `rail`.
    fn post(
        &mut self,
        rail: usize,
        vpeer: usize,
        range: std::ops::Range<usize>,
        kind: OpKind,
    ) -> Result<PieceTicket, TransportError>;
}

/// The progress of one batch.
#[derive(Debug)]
pub(crate) struct Flight {
    pub(crate) id: u64,
    op: Op,
    notify: Option<([u8; NOTIFY_MAX], usize)>,
    start: Instant,
    /// Runs posted so far (in list order).
    posted: usize,
    /// Runs before this one are all done.
    done_prefix: usize,
    /// Runs done.
    done: usize,
    retried: usize,
    runs_posted: usize,
    lost: Vec<(usize, usize)>,
    /// The completion error of the last rail this batch saw fail.
    last_loss: Option<CompletionError>,
    bytes_per_rail: [u64; MAX_RAILS],
    failure: Option<TransferError>,
    notified: usize,
    finished: bool,
    scratch: Vec<PieceError>,
}

/// Posting stops once a peer's send queue has this little room: runs are
/// followed first, so done tickets free their slots.
const LOW_ROOM: u32 = 20;

impl Flight {
    /// A batch of `prepared` as `op`, checked before anything is posted.
    pub(crate) fn start(
        eng: &EngineState,
        prepared: &PreparedList,
        op: Op,
        notify: Option<&[u8]>,
        lease: &Lease<'_>,
    ) -> Result<Flight, TransferError> {
        if prepared.engine != eng.id {
            return Err(TransferError::Mismatch(
                "the list was prepared for another engine".into(),
            ));
        }
        let missing = match op {
            Op::Write => prepared.missing.write.map(|m| (m, "REMOTE_WRITE")),
            Op::Read => prepared.missing.read.map(|m| (m, "REMOTE_READ")),
        };
        if let Some(((entry, peer, granted), right)) = missing {
            return Err(TransferError::MissingRight {
                entry,
                peer,
                right,
                granted,
            });
        }
        if !prepared.pieces.iter().all(|p| p.covered_by(lease)) {
            return Err(TransferError::LeaseMismatch);
        }
        if op == Op::Read && !lease.writable() {
            return Err(TransferError::ReadNeedsExclusive);
        }
        let notify = match notify {
            Some(d) if d.len() > NOTIFY_MAX => {
                return Err(TransferError::NotificationTooLong {
                    len: d.len(),
                    max: NOTIFY_MAX,
                });
            }
            Some(d) => {
                let mut b = [0u8; NOTIFY_MAX];
                b[..d.len()].copy_from_slice(d);
                Some((b, d.len()))
            }
            None => None,
        };
        if prepared.busy.replace(true) {
            return Err(TransferError::Busy);
        }
        prepared
            .state
            .borrow_mut()
            .iter_mut()
            .for_each(|s| *s = RunState::default());
        let id = eng.next_batch();
        tracing::debug!(
            batch = id,
            op = ?op,
            entries = prepared.entries,
            bytes = prepared.bytes,
            runs = prepared.runs.len(),
            "transfer batch submitted"
        );
        Ok(Flight {
            id,
            op,
            notify,
            start: Instant::now(),
            posted: 0,
            done_prefix: 0,
            done: 0,
            retried: 0,
            runs_posted: 0,
            lost: Vec::new(),
            last_loss: None,
            bytes_per_rail: [0; MAX_RAILS],
            failure: None,
            notified: 0,
            finished: false,
            scratch: Vec::new(),
        })
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Posts `run` on the best alive rail to its peer; a rail that refuses
    /// (broken) leaves the set and the next is tried. With `roomy`, only
    /// among rails whose queue to the peer has room for a run now (else
    /// `Ok(false)`: nothing posted, as no alive rail has room): posting on
    /// a full queue would wait there for room while another rail idles.
    fn post_run(
        &mut self,
        eng: &EngineState,
        prepared: &PreparedList,
        poster: &mut dyn Poster,
        i: usize,
        roomy: bool,
    ) -> Result<bool, TransferError> {
        let run = prepared.runs[i];
        let peer = run.peer as usize;
        loop {
            let core = poster.core();
            let has_room = |r: usize| !roomy || core.send_room(r * eng.peers + peer) >= LOW_ROOM;
            let rail = eng
                .sched
                .borrow_mut()
                .pick(run.bytes, |r| eng.is_alive(r, peer) && has_room(r));
            if rail.is_none() && roomy && (0..eng.rails).any(|r| eng.is_alive(r, peer)) {
                return Ok(false);
            }
            let Some(rail) = rail else {
                return Err(TransferError::PeerUnreachable {
                    peer,
                    entry: prepared.slice_entry[run.slice as usize] as usize,
                    last: self.last_loss,
                });
            };
            let range = run.first as usize..(run.first + run.len) as usize;
            let vpeer = rail * eng.peers + peer;
            match poster.post(rail, vpeer, range, self.op.kind()) {
                Ok(ticket) => {
                    eng.sched.borrow_mut().posted(rail, run.bytes);
                    let posted_ns = self.now_ns();
                    prepared.state.borrow_mut()[i] = RunState {
                        ticket: Some(ticket),
                        rail: rail as u16,
                        done: false,
                        posted_ns,
                    };
                    self.runs_posted += 1;
                    return Ok(true);
                }
                Err(TransportError::Broken { .. } | TransportError::Disconnected { .. }) => {
                    self.lose(eng, rail, peer);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn lose(&mut self, eng: &EngineState, rail: usize, peer: usize) {
        if eng.lose(rail, peer) {
            tracing::warn!(
                "transfer: rail {rail} to peer {peer} failed; its runs go over the others"
            );
            self.lost.push((rail, peer));
        }
    }

    /// One look: follows the runs posted, posts more while there is room,
    /// and once all are done sends the notification. Whether the batch has
    /// ended (then [`Flight::outcome`] says how).
    pub(crate) fn step(
        &mut self,
        eng: &EngineState,
        prepared: &PreparedList,
        poster: &mut dyn Poster,
        deadline: Instant,
    ) -> bool {
        if self.finished {
            return true;
        }
        if let Err(e) = self.try_step(eng, prepared, poster, deadline) {
            self.failure.get_or_insert(e);
        }
        if self.failure.is_some() {
            // Nothing more is posted; what is out drains (its tickets are
            // given up, so their slots free as they complete).
            self.give_up(prepared, poster.core());
            self.finished = true;
        }
        self.finished
    }

    fn try_step(
        &mut self,
        eng: &EngineState,
        prepared: &PreparedList,
        poster: &mut dyn Poster,
        deadline: Instant,
    ) -> Result<(), TransferError> {
        let core = poster.core();
        core.progress()?;
        self.follow(eng, prepared, poster)?;
        let runs = prepared.runs.len();
        while self.posted < runs && self.post_run(eng, prepared, poster, self.posted, true)? {
            self.posted += 1;
        }
        if self.done == runs && self.posted == runs {
            self.send_notifications(eng, prepared, poster.core(), deadline)?;
            self.finished = true;
        }
        Ok(())
    }

    /// Takes what completed: done runs, and failed ones moved to another
    /// rail (a lost connection) or ending the batch (anything else).
    fn follow(
        &mut self,
        eng: &EngineState,
        prepared: &PreparedList,
        poster: &mut dyn Poster,
    ) -> Result<(), TransferError> {
        self.scratch.clear();
        poster.core().take_piece_errors(&mut self.scratch);
        let mut errors = std::mem::take(&mut self.scratch);
        for pe in &errors {
            self.piece_failed(eng, prepared, pe)?;
        }
        errors.clear();
        self.scratch = errors;
        let mut i = self.done_prefix;
        while i < self.posted {
            let st = prepared.state.borrow()[i];
            if st.done {
                if i == self.done_prefix {
                    self.done_prefix += 1;
                }
                i += 1;
                continue;
            }
            let Some(ticket) = st.ticket else {
                i += 1;
                continue;
            };
            let run = prepared.runs[i];
            let rail = usize::from(st.rail);
            let state = poster.core().poll_piece(ticket);
            match state {
                PieceState::Pending => {}
                PieceState::Done | PieceState::Gone => {
                    let took = Duration::from_nanos(self.now_ns().saturating_sub(st.posted_ns));
                    eng.sched.borrow_mut().ended(rail, run.bytes, took, true);
                    self.bytes_per_rail[rail] += run.bytes;
                    prepared.state.borrow_mut()[i].done = true;
                    self.done += 1;
                    if i == self.done_prefix {
                        self.done_prefix += 1;
                    }
                }
                PieceState::Failed(e) => {
                    eng.sched
                        .borrow_mut()
                        .ended(rail, run.bytes, Duration::ZERO, false);
                    let peer = run.peer as usize;
                    if !rail_class(e) {
                        let entry =
                            prepared.slice_entry[(run.slice + run.len - 1) as usize] as usize;
                        return Err(fail(entry, peer, rail, e));
                    }
                    self.last_loss = Some(e.with_peer(peer));
                    self.lose(eng, rail, peer);
                    self.retried += 1;
                    // Now, even on a full queue: it waits there for room.
                    self.post_run(eng, prepared, poster, i, false)?;
                }
            }
            i += 1;
        }
        Ok(())
    }

    /// A piece before the last of its run failed: a lost rail is noted
    /// (its run's ticket then fails and the run moves); anything else ends
    /// the batch, naming the piece's entry. An error of a run this batch
    /// does not follow (an earlier batch's, given up on; or this batch's
    /// run on a rail it already left) is not this batch's.
    fn piece_failed(
        &mut self,
        eng: &EngineState,
        prepared: &PreparedList,
        pe: &PieceError,
    ) -> Result<(), TransferError> {
        let (tag, e) = (pe.tag as usize, pe.error);
        let ours = prepared.slice_run.get(tag).is_some_and(|&i| {
            prepared.state.borrow()[i as usize]
                .ticket
                .is_some_and(|t| t.run() == pe.run)
        });
        if !ours {
            return Ok(());
        }
        let entry = prepared.slice_entry[tag] as usize;
        let vpeer = e.peer.unwrap_or(0);
        let (rail, peer) = (vpeer / eng.peers.max(1), vpeer % eng.peers.max(1));
        if rail_class(e) {
            self.last_loss = Some(e.with_peer(peer));
            self.lose(eng, rail, peer);
            return Ok(());
        }
        Err(fail(entry, peer, rail, e))
    }

    fn send_notifications(
        &mut self,
        eng: &EngineState,
        prepared: &PreparedList,
        core: &ChannelCore,
        deadline: Instant,
    ) -> Result<(), TransferError> {
        let Some((data, len)) = self.notify else {
            return Ok(());
        };
        let mut notifier = eng.notifier.borrow_mut();
        for &peer in &prepared.peers {
            let mut tried: Vec<usize> = Vec::new();
            let lost = &mut self.lost;
            notifier
                .send(core, peer, self.id, &data[..len], deadline, |failed| {
                    if let Some(r) = failed {
                        tried.push(r);
                        if eng.lose(r, peer) {
                            lost.push((r, peer));
                        }
                    }
                    (0..eng.rails).find(|&r| eng.is_alive(r, peer) && !tried.contains(&r))
                })
                .map_err(|e| match e {
                    TransferError::PeerUnreachable { peer, .. } => TransferError::PeerUnreachable {
                        peer,
                        entry: prepared.entries,
                        last: self.last_loss,
                    },
                    e => e,
                })?;
            self.notified += 1;
        }
        Ok(())
    }

    /// Gives up the tickets of runs not done (a failed batch, or a batch
    /// dropped or abandoned by its owner): their slots free as they
    /// complete; the lease stays held by an owned run until then.
    pub(crate) fn give_up(&mut self, prepared: &PreparedList, core: &ChannelCore) {
        let mut state = prepared.state.borrow_mut();
        for st in state.iter_mut().take(self.posted).filter(|s| !s.done) {
            if let Some(t) = st.ticket.take() {
                core.abandon_piece(t);
            }
        }
        prepared.busy.set(false);
    }

    /// Runs not done yet.
    pub(crate) fn pending(&self, prepared: &PreparedList) -> usize {
        prepared.runs.len() - self.done
    }

    /// How the batch ended (once [`Flight::step`] said it has).
    pub(crate) fn outcome(&mut self, prepared: &PreparedList) -> Result<Report, TransferError> {
        prepared.busy.set(false);
        let took_us = self.start.elapsed().as_micros() as u64;
        if let Some(e) = self.failure.take() {
            tracing::debug!(batch = self.id, took_us, "transfer batch failed: {e}");
            return Err(e);
        }
        tracing::debug!(
            batch = self.id,
            entries = prepared.entries,
            bytes = prepared.bytes,
            runs = self.runs_posted,
            retried = self.retried,
            rails_lost = self.lost.len(),
            notified = self.notified,
            took_us,
            "transfer batch done"
        );
        Ok(Report {
            batch: self.id,
            entries: prepared.entries,
            bytes: prepared.bytes,
            runs: self.runs_posted,
            retried: self.retried,
            rails_lost: std::mem::take(&mut self.lost),
            bytes_per_rail: self.bytes_per_rail,
            elapsed: self.start.elapsed(),
            notified: self.notified,
        })
    }

    /// Whether it has ended.
    pub(crate) fn finished(&self) -> bool {
        self.finished
    }

    /// Steps until the batch ends or `deadline`: its outcome, or a
    /// timeout (the batch goes on; wait again).
    pub(crate) fn wait(
        &mut self,
        eng: &EngineState,
        prepared: &PreparedList,
        poster: &mut dyn Poster,
        deadline: Instant,
    ) -> Result<Report, TransferError> {
        let waited = Instant::now();
        let mut idle = 0u32;
        while !self.step(eng, prepared, poster, deadline) {
            if Instant::now() >= deadline {
                return Err(TransferError::Timeout {
                    pending: self.pending(prepared),
                    total: prepared.runs.len(),
                    after: waited.elapsed(),
                });
            }
            // Spin a little, then let the other threads (UCX's progress
            // thread, soft-RoCE's kernel work) have the CPU.
            idle += 1;
            if idle > 64 {
                std::thread::yield_now();
            }
        }
        self.outcome(prepared)
    }
}

/// Whether a completion error means the rail's connection failed (the
/// run goes over another rail) rather than the piece itself.
/// Whether `e` says the connection failed (the run may go over another
/// rail), not the request. A local QP operation error counts: the pieces
/// were checked when prepared, and soft-RoCE reports its link going down
/// so.
fn rail_class(e: CompletionError) -> bool {
    e.status == WcStatus::LOC_QP_OP_ERR
        || matches!(
            e.status.class(),
            WcClass::RetryExceeded | WcClass::Flushed | WcClass::Fatal | WcClass::ReceiverNotReady
        )
}

fn fail(entry: usize, peer: usize, rail: usize, error: CompletionError) -> TransferError {
    // The channel names the peer of the rails' whole (rail * peers + peer).
    let error = error.with_peer(peer);
    if error.status.class() == WcClass::RemoteAccess {
        TransferError::RemoteAccess {
            entry,
            peer,
            rail,
            error,
        }
    } else {
        TransferError::Completion {
            entry,
            peer,
            rail,
            error,
        }
    }
}
