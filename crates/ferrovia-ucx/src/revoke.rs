//! Revoking a deregistered key, on the owner's side: its memory is not
//! unmapped (nor, for memory the user registered, freed) before every peer
//! that fetched the key has acknowledged the revocation or has its
//! endpoint closed. UCX's software RMA (tcp) and shared memory check no
//! key at the target: without this a stale descriptor would still reach
//! the memory, and a shared-memory peer writes with cross-memory attach
//! straight into this address space.
//!
//! The thread that drops the last handle of a registration runs
//! [`revoke`] after removing the key from the directory (a fetch from then
//! on answers "not found"): it hands a [`Revocation`] naming the peers that
//! fetched the key to the engine and waits. Whoever turns the engine (the
//! progress thread, a polling user thread, or this thread itself while the
//! engine is free) sends each peer a revocation, crosses it off when its
//! acknowledgement arrives, its endpoint fails or is closed, or it says
//! goodbye, and once the bound passes force-closes the endpoints of those
//! still silent (see `engine::control_plane`).
//!
//! No deadlock with the turn-taking: the waiting thread only ever
//! `try_lock`s the engine and never sleeps holding it, so the progress
//! thread (which stands back only while user threads turn) or a polling
//! thread turns it meanwhile. The engine holds no registration, so no
//! drop runs inside a turn or on the progress thread; if one ever did, it
//! would wait at most the bound plus [`GIVE_UP_AFTER`], not forever.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// How long the dropping thread turns the engine itself before it sleeps
/// (a revocation round trip on an idle host is well under this).
const SPIN: Duration = Duration::from_micros(300);
/// How long it sleeps between looks while the progress thread works.
const SLICE: Duration = Duration::from_millis(10);
/// How long past the bound it waits for an engine nobody turns (stopped
/// or wedged) before it unmaps anyway and says so.
pub(crate) const GIVE_UP_AFTER: Duration = Duration::from_secs(2);

/// How a deregistration reaches the transport's engine: weakly (the
/// engine owns the key directory that holds this), so `None` once the
/// transport is gone. The engine implements it (`engine::driver`), so
/// revocation names no engine.
pub(crate) trait Driver: Send + Sync {
    /// The engine, held for one revocation.
    fn upgrade(&self) -> Option<Box<dyn Turn>>;
}

/// What one revocation does with the engine.
pub(crate) trait Turn {
    /// Hands `r` to whoever turns the engine next.
    fn submit(&self, r: Arc<Revocation>);
    /// Whether the progress thread still runs.
    fn alive(&self) -> bool;
    /// Turns the engine on this thread if nobody else does; whether it
    /// did.
    fn turn_inline(&self) -> bool;
    /// Wakes the progress thread.
    fn wake(&self);
}

/// One key's revocation: the peers yet to answer.
pub(crate) struct Revocation {
    pub(crate) key: u32,
    /// When the engine force-closes the endpoints of the silent peers.
    pub(crate) deadline: Instant,
    pending: Mutex<Vec<usize>>,
    settled: Condvar,
}

impl Revocation {
    pub(crate) fn new(key: u32, peers: Vec<usize>, timeout: Duration) -> Revocation {
        Revocation {
            key,
            deadline: ferrovia_types::deadline_after(timeout),
            pending: Mutex::new(peers),
            settled: Condvar::new(),
        }
    }

    /// The peers yet to answer.
    pub(crate) fn pending(&self) -> Vec<usize> {
        self.pending.lock().clone()
    }

    /// Whether `peer` is yet to answer.
    pub(crate) fn awaits(&self, peer: usize) -> bool {
        self.pending.lock().contains(&peer)
    }

    /// Crosses `peer` off (it acknowledged, or its endpoint is closed);
    /// whether it was pending.
    pub(crate) fn answered(&self, peer: usize) -> bool {
        let mut p = self.pending.lock();
        let Some(i) = p.iter().position(|&q| q == peer) else {
            return false;
        };
        p.swap_remove(i);
        if p.is_empty() {
            self.settled.notify_all();
        }
        true
    }

    /// Every peer answered or is closed.
    pub(crate) fn is_settled(&self) -> bool {
        self.pending.lock().is_empty()
    }

    /// Sleeps until settled or `until`.
    fn wait(&self, until: Instant) {
        let mut p = self.pending.lock();
        if !p.is_empty() {
            let _ = self.settled.wait_until(&mut p, until);
        }
    }
}

/// Revokes `key`, which `fetched` fetched, already removed from the
/// directory; returns once none of their accesses can reach its memory.
pub(crate) fn revoke(
    driver: Option<&dyn Driver>,
    key: u32,
    fetched: Vec<usize>,
    timeout: Duration,
) {
    let Some(engine) = driver.and_then(Driver::upgrade) else {
        // The transport is gone: its endpoints are closed and it said
        // goodbye after revoking every key peers had fetched.
        return;
    };
    let start = Instant::now();
    let _span = tracing::debug_span!("revoke", key, peers = ?fetched).entered();
    let r = Arc::new(Revocation::new(key, fetched, timeout));
    engine.submit(r.clone());
    let give_up = r.deadline + GIVE_UP_AFTER;
    let mut woke_at_deadline = false;
    loop {
        if r.is_settled() {
            tracing::debug!(
                took_us = start.elapsed().as_micros() as u64,
                "every peer that fetched the key acknowledged, failed or left"
            );
            return;
        }
        if !engine.alive() {
            tracing::error!(
                "ucx: the progress thread stopped before peers acknowledged the revocation of key {key}; unmapping it"
            );
            return;
        }
        let now = Instant::now();
        if now >= give_up {
            tracing::error!(
                "ucx: nothing progressed the revocation of key {key} (peers {:?}) within {:?}; unmapping it",
                r.pending(),
                give_up - start
            );
            return;
        }
        if now < start + SPIN {
            // The fast path: the acknowledgement comes back while this
            // thread turns the engine itself.
            let _ = engine.turn_inline();
            continue;
        }
        if now >= r.deadline && !woke_at_deadline {
            // The engine closes the silent peers on its next turn.
            woke_at_deadline = true;
            if !engine.turn_inline() {
                engine.wake();
            }
        }
        r.wait((now + SLICE).min(give_up));
    }
}
