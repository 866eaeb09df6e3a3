//! The engine: the UCX worker, its endpoints, remote keys and requests,
//! behind one lock. The worker is created SERIALIZED: whoever holds the
//! lock may call into it, and four kinds of thread do:
//!
//! - a user thread that posts: it issues its ops itself (`post_sends`,
//!   `post_recvs`) when the lock is free, with no hand-off;
//! - a user thread that polls or waits: it takes a turn itself when the
//!   lock is free and takes what completed straight from the engine;
//! - a thread dropping a registration, which turns the engine while it
//!   waits for the revocation;
//! - the progress thread (`progress`), which owns the engine and turns it
//!   whenever nobody else does, and stands back while user threads do.
//!
//! A post that finds the lock taken goes through the command queue; every
//! turn, and every direct post, drains that queue first, so ops leave in
//! posting order whichever way they came. A turn: commands,
//! `ucp_worker_progress`, then the events UCX's callbacks recorded
//! (`crate::ucp::events`; no callback re-enters the engine). An `*_nbx` call
//! that completes or fails inside the call has no callback: the send
//! pipeline applies that outcome at once. Completions collect in the
//! engine (`ready`); whoever lets go of the lock without taking them
//! publishes them to `Shared::done` and wakes a waiting thread.
//!
//! The parts: `token` (what a request's `user_data` names), `send` (the
//! send pipeline, with `crate::peer`'s ordering rules), `endpoints`
//! (creation, failure, close), `control_plane` (keys, revocations,
//! goodbyes); receives are `crate::tag`'s.
//!
//! Buffers named by an operation stay in use until UCX reports the
//! operation complete (or cancelled); the channel core's scopes wait for
//! that report, so dropping a handle never frees memory UCX still touches.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use ferrovia_channel::transport::Completion;

use crate::control::AM_ID;
use crate::error::UcxError;
use crate::keys::KeyDirectory;
use crate::peer::Peer;
use crate::tag::{self, Receives};
use crate::ucp::events::{self, Event};
use crate::ucp::{self, Rkey, Status, Worker, vendor_err, wc_status};

mod control_plane;
mod direct;
mod driver;
mod endpoints;
mod generation;
mod link;
mod progress;
mod request;
mod send;
pub(crate) mod token;

pub(crate) use driver::EngineDriver;
pub(crate) use progress::{
    Cmd, EngineCell, Shared, spawn, take_left, with_engine, with_engine_unturned,
};
use token::{
    CLOSE, CONTROL_TOKEN, CTRL, EP_ERROR, FLUSH, GOODBYE_FLUSH, NOTIFY, PART, RECV, REVOKE_FLUSH,
    split,
};

/// How long shutdown waits for endpoints to close gracefully.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Counts the posting tests look at (`UcxTransport::post_stats`).
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) direct_posts: u64,
    pub(crate) endpoint_flushes: u64,
    /// Ops done on a peer's mapped memory (`crate::mapped`).
    pub(crate) mapped_accesses: u64,
}

pub(crate) struct Engine {
    worker: Worker,
    efd: i32,
    shared: Arc<Shared>,
    dir: Arc<KeyDirectory>,
    /// The index peers know this side by (the sender in tags and control
    /// messages): the rank in a job, 0 on a connection made by address.
    me: usize,
    /// The peer index of this side's own loopback endpoint, in a job.
    loopback: Option<usize>,
    peers: Vec<Peer>,
    /// Every peer's worker address (a renewed endpoint goes to it again).
    addresses: Vec<Vec<u8>>,
    recvs: Receives,
    /// The owner's connection to the peer of a connection made by address:
    /// when the peer closes it, the peer is gone.
    link: Option<link::Link>,
    ctrl: std::collections::HashMap<u32, Vec<u8>>,
    next_ctrl: u32,
    closing: usize,
    dirty: Vec<usize>,
    is_dirty: Vec<bool>,
    dead_rkeys: Vec<Rkey>,
    cp: control_plane::ControlPlane,
    /// Completions not yet handed out: the polling thread takes them
    /// straight from here (also those its own posts produced); the
    /// progress thread and a revocation's turns publish them to
    /// `Shared::done` before they let go of the lock.
    ready: VecDeque<Completion>,
    pub(crate) stats: Stats,
    scratch: Vec<Event>,
    shutdown: bool,
    /// The pool's receives are being cancelled: a stale message one of
    /// them took is reported flushed, not posted again.
    pool_cancelling: bool,
    /// Endpoints use peer error handling (not every UCX transport has it).
    detect_failures: bool,
    /// After a panic: the worker is not destroyed.
    leak: bool,
    /// Keys are mapped where UCX attached the peer's memory here
    /// ([`crate::mapped::enabled`]).
    map_keys: bool,
    /// Ops the direct lane did since the worker last turned
    /// (`direct::TURN_EVERY`).
    direct_since_turn: u32,
    // Keeps the context alive while the worker exists.
    _ctx: Arc<ucp::Context>,
}
impl Engine {
    pub(super) fn new(
        ctx: Arc<ucp::Context>,
        dir: Arc<KeyDirectory>,
        shared: Arc<Shared>,
        detect_failures: bool,
    ) -> Result<(Engine, Vec<u8>), UcxError> {
        // SERIALIZED: the progress thread and polling user threads take
        // turns under the engine's lock.
        let worker = Worker::create(&ctx)?;
        let mut engine = Engine {
            worker,
            efd: -1,
            shared,
            dir,
            me: 0,
            loopback: None,
            peers: Vec::new(),
            addresses: Vec::new(),
            recvs: Receives::default(),
            link: None,
            ctrl: Default::default(),
            next_ctrl: 0,
            closing: 0,
            dirty: Vec::new(),
            is_dirty: Vec::new(),
            dead_rkeys: Vec::new(),
            cp: Default::default(),
            ready: VecDeque::new(),
            stats: Stats::default(),
            scratch: Vec::new(),
            shutdown: false,
            pool_cancelling: false,
            detect_failures,
            leak: false,
            map_keys: crate::mapped::enabled(),
            direct_since_turn: 0,
            _ctx: ctx,
        };
        // From here on `engine`'s Drop destroys the worker on error.
        let address = engine.address()?;
        // SAFETY: the worker was just created (its context has the WAKEUP
        // feature) and no other thread has it yet.
        engine.efd = unsafe { worker.efd() }?;
        // SAFETY: as above; the handler reports control messages as events
        // of `CONTROL_TOKEN`.
        unsafe { worker.set_control_handler(AM_ID, CONTROL_TOKEN) }?;
        engine.shared.worker.set(Some(worker));
        Ok((engine, address))
    }

    fn address(&self) -> Result<Vec<u8>, UcxError> {
        // SAFETY: the engine's worker, live until its Drop, used under the
        // engine's lock (or in `new`, before the engine is shared).
        unsafe { self.worker.address() }
    }

    /// One round: commands, `ucp_worker_progress`, events. Whether
    /// anything happened.
    pub(crate) fn turn(&mut self) -> bool {
        if self.shutdown {
            return false;
        }
        self.direct_since_turn = 0;
        let mut busy = self.drain_commands();
        if self.shutdown {
            return busy;
        }
        if self.cp.has_revocations() {
            busy |= self.expire_revocations();
        }
        if self.link.is_some() {
            busy |= self.watch_link();
        }
        // SAFETY: the worker is used under the engine's lock only.
        busy |= unsafe { self.worker.progress() } != 0;
        busy |= self.handle_events();
        busy
    }

    /// Prepares to sleep: marks the thread sleeping and arms the worker's
    /// event fd; the fd to wait on, or `None` when there is work already.
    pub(super) fn arm(&mut self) -> Option<i32> {
        self.shared.sleeping.store(true, SeqCst);
        if self.shared.cmds.is_empty() {
            // SAFETY: the worker is used under the engine's lock only.
            let armed = unsafe { self.worker.arm() } == Status::OK;
            if armed && self.shared.cmds.is_empty() {
                return Some(self.efd);
            }
        }
        self.shared.sleeping.store(false, SeqCst);
        None
    }

    /// Whether some peer has send-queue ops not yet reported: UCX may hold
    /// sends that only progress finishes (see the progress thread).
    pub(super) fn sends_in_flight(&self) -> bool {
        self.peers.iter().any(|p| !p.queue.is_empty())
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown
    }

    /// Marks the engine unusable after a panic: its worker is leaked.
    pub(crate) fn poison(&mut self) {
        self.leak = true;
        self.shutdown = true;
    }

    pub(super) fn mark(&mut self, peer: usize) {
        if let Some(d) = self.is_dirty.get_mut(peer)
            && !*d
        {
            *d = true;
            self.dirty.push(peer);
        }
    }

    /// Posts receives from `peer` from the caller's thread, which holds the
    /// engine: commands queued meanwhile go first.
    pub(crate) fn post_recvs(&mut self, peer: usize, ops: &[ferrovia_channel::transport::RecvOp]) {
        self.stats.direct_posts += 1;
        self.drain_commands();
        for op in ops {
            self.post_recv(peer, op);
        }
        // An outcome inside the call is an event: none stays behind in
        // this thread's list once it lets go of the engine.
        if events::pending() {
            self.handle_events();
        }
    }

    /// Posts receives to the shared pool (any sender) from the caller's
    /// thread, which holds the engine: commands queued meanwhile go first.
    pub(crate) fn post_pool_recvs(&mut self, ops: &[ferrovia_channel::transport::RecvOp]) {
        self.stats.direct_posts += 1;
        self.drain_commands();
        for op in ops {
            self.recvs.post(self.worker, tag::ANY, 0, op);
        }
        if events::pending() {
            self.handle_events();
        }
    }

    /// Cancels the pool's receives: each is reported, flushed.
    pub(crate) fn cancel_pool(&mut self) {
        self.drain_commands();
        self.pool_cancelling = true;
        self.recvs.cancel(self.worker, Some(tag::ANY));
        self.handle_events();
        self.pool_cancelling = false;
    }

    /// Arms the pool's low watermark.
    pub(crate) fn arm_pool_limit(&mut self, limit: u32) {
        self.drain_commands();
        self.handle_events();
        self.recvs.arm_limit(limit);
    }

    /// Whether the pool fell below its armed limit (checking clears it).
    pub(crate) fn pool_limit_hit(&mut self) -> bool {
        self.handle_events();
        self.recvs.take_limit_hit()
    }

    /// Posts a receive from `peer`, or completes it with an error if the
    /// peer does not exist or failed.
    pub(super) fn post_recv(&mut self, peer: usize, op: &ferrovia_channel::transport::RecvOp) {
        let status = match self.peers.get(peer) {
            None => Status::INVALID_PARAM,
            Some(p) if p.failed.is_some() => Status::CANCELED,
            Some(p) => return self.recvs.post(self.worker, peer, p.generation, op),
        };
        self.complete(send_completion(op.wr_id, status));
    }

    /// Acts on everything UCX reported; whether there was anything.
    pub(super) fn handle_events(&mut self) -> bool {
        if self.dirty.is_empty() && !events::pending() {
            // What an empty poll finds: no list to swap.
            return false;
        }
        let mut any = false;
        loop {
            let mut batch = std::mem::take(&mut self.scratch);
            events::take(&mut batch);
            if batch.is_empty() && self.dirty.is_empty() {
                self.scratch = batch;
                break;
            }
            any = true;
            for ev in batch.drain(..) {
                self.on_event(ev);
            }
            self.scratch = batch;
            while let Some(peer) = self.dirty.pop() {
                self.is_dirty[peer] = false;
                self.service(peer);
                self.retire(peer);
            }
        }
        any
    }

    fn complete(&mut self, c: Completion) {
        self.ready.push_back(c);
    }

    /// Moves the completions not taken to `Shared::done`, where any thread
    /// finds them, and wakes a thread waiting for them.
    pub(crate) fn publish(&mut self) {
        if self.ready.is_empty() {
            return;
        }
        for c in self.ready.drain(..) {
            self.shared.done.push(c);
        }
        self.shared.notify();
    }

    /// Moves up to `out.len()` completions to `out`, the published ones
    /// first (they are older); how many.
    pub(crate) fn take_completions(&mut self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        if !self.shared.done.is_empty() {
            while n < out.len() {
                let Some(c) = self.shared.done.pop() else {
                    break;
                };
                out[n] = c;
                n += 1;
            }
        }
        while n < out.len() {
            let Some(c) = self.ready.pop_front() else {
                break;
            };
            out[n] = c;
            n += 1;
        }
        n
    }

    /// Applies one event.
    fn on_event(&mut self, ev: Event) {
        let (class, peer, index) = split(ev.token);
        match class {
            PART | NOTIFY => {
                if let Some(e) = self.peers.get_mut(peer).and_then(|p| p.entry_mut(index)) {
                    if class == PART {
                        e.outstanding = e.outstanding.saturating_sub(1);
                    } else {
                        e.notified = true;
                    }
                    if ev.status != Status::OK {
                        e.fail(ev.status);
                    }
                    self.mark(peer);
                }
            }
            FLUSH if peer < self.peers.len() => self.flushed(peer, index, ev.status),
            RECV => {
                if let Some(f) = self.recvs.finish(index, &ev) {
                    self.on_received(f);
                }
            }
            CTRL => {
                self.ctrl.remove(&index);
                if ev.status != Status::OK {
                    tracing::debug!(
                        "ucx: control message to {peer} failed: status {}",
                        ev.status
                    );
                }
            }
            CLOSE => self.closing = self.closing.saturating_sub(1),
            REVOKE_FLUSH => self.revoke_flushed(peer, index, ev.status),
            GOODBYE_FLUSH => self.goodbye_flushed(peer, ev.status),
            // An error of an endpoint since renewed: nothing to fail.
            EP_ERROR if self.peers.get(peer).is_some_and(|p| p.generation != index) => {
                tracing::debug!(
                    "ucx: a replaced endpoint to peer {peer} failed (ucs_status_t {})",
                    ev.status
                );
            }
            EP_ERROR => {
                // A peer that said goodbye, or our own shutdown, closes
                // endpoints on purpose: a clean job stays quiet.
                let expected = self.shutdown || self.peers.get(peer).is_some_and(|p| p.departed);
                if expected {
                    tracing::debug!(
                        "ucx: endpoint to peer {peer} closed (ucs_status_t {}) after its goodbye or during shutdown",
                        ev.status
                    );
                } else {
                    tracing::warn!(
                        "ucx: endpoint to peer {peer} failed (ucs_status_t {}); failing its work",
                        ev.status
                    );
                }
                self.lose_peer(peer, ev.status);
            }
            _ if ev.token == CONTROL_TOKEN => self.on_control(ev.data.as_deref().unwrap_or(&[])),
            _ => {}
        }
    }
}

// SAFETY: the UCX handles inside are used by one thread at a time, under
// the engine's mutex (the worker is created SERIALIZED); the raw buffers
// they name belong to operations whose owners wait for their completion.
unsafe impl Send for Engine {}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.worker.set(None);
        if self.leak {
            return;
        }
        // SAFETY: created in `new`, destroyed once; endpoints were closed.
        unsafe { self.worker.destroy() };
    }
}

/// The completion of a send-queue op (or of any op refused before UCX saw
/// it): no bytes, no immediate.
fn send_completion(wr_id: u64, status: Status) -> Completion {
    Completion {
        wr_id,
        status: wc_status(status),
        vendor_err: vendor_err(status),
        byte_len: 0,
        imm: None,
        peer: None,
    }
}
