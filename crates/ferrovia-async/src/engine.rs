//! The shared state behind an [`Async`](crate::Async) handle, its
//! operations and its reactor: the target (a `Node` or `MultiChannel`)
//! behind one lock.
//!
//! Why a lock: the channel engine keeps its bookkeeping in a `RefCell`
//! (it is `Send`, not `Sync`), so whoever touches it holds the target's
//! mutex: the reactor while it routes completions, a future while it posts
//! or takes its result. Every hold is short and never waits (owned posts
//! never block), so the mutex is uncontended in the common case and the
//! futures are `Send`: they run on any tokio runtime, multi-threaded
//! included.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use ferrovia_channel::engine::{ChannelCore, OwnedTicket};
use ferrovia_channel::{MultiChannel, ScopeTarget};
use ferrovia_mr::MrRegistry;
use ferrovia_node::Node;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::config::{AsyncConfig, Wake};

/// Routing rounds per reactor turn before it lets woken tasks run.
const ROUNDS: usize = 16;

/// What an [`Async`](crate::Async) engine can run over: a scope target
/// with a registry, movable to the reactor's thread.
pub trait Target: ScopeTarget + Send + 'static {
    /// The registry its buffers are registered with.
    fn registry(&self) -> &MrRegistry;
}

impl Target for Node {
    fn registry(&self) -> &MrRegistry {
        Node::registry(self)
    }
}

impl Target for MultiChannel {
    fn registry(&self) -> &MrRegistry {
        MultiChannel::registry(self)
    }
}

/// The engine as operations and the reactor see it, whatever the target.
pub(crate) trait Engine: Send + Sync {
    /// Runs `f` on the channel engine, under the lock.
    fn with_core(&self, f: &mut dyn FnMut(&ChannelCore));
    /// Gives up on a request (its future was dropped); never blocks.
    fn abandon(&self, t: OwnedTicket);
    /// How often a future polls the transport itself each time it is
    /// polled, before it leaves the rest to the reactor.
    fn own_looks(&self) -> usize;
    /// The reactor's turn: routes what completed (waking futures), flushes
    /// the peers of overdue abandoned requests. Returns how many completed
    /// and when the next abandoned request is due.
    fn turn(&self) -> (usize, Option<Duration>);
    /// Arms the event fd and polls once more (the protocol of
    /// `Transport::arm`); how many completed.
    fn arm_and_poll(&self) -> usize;
    /// Consumes the event fd's readiness.
    fn ack(&self);
}

/// Runs `f` on the engine under the lock and returns what it returned.
pub(crate) fn with<R>(e: &dyn Engine, f: impl FnOnce(&ChannelCore) -> R) -> R {
    let mut f = Some(f);
    let mut out = None;
    e.with_core(&mut |core| {
        if let Some(f) = f.take() {
            out = Some(f(core));
        }
    });
    match out {
        Some(r) => r,
        None => unreachable!("with_core runs its closure exactly once"),
    }
}

pub(crate) struct Inner<T> {
    pub(crate) target: Mutex<T>,
    pub(crate) cfg: AsyncConfig,
    abandoned_deadline: Duration,
    pub(crate) registry: MrRegistry,
    pub(crate) peers: usize,
    /// Requests given up on while the lock was held (a future dropped
    /// inside `Async::with`, or on another thread during a turn).
    orphans: Mutex<Vec<OwnedTicket>>,
    has_orphans: AtomicBool,
    /// Wakes the reactor (orphans to settle, or shutdown); pokes it once
    /// more when dropped, so it sees the engine gone and ends.
    pub(crate) poke: Poke,
    /// How often the reactor woke because the event fd was readable.
    pub(crate) fd_wakes: Arc<std::sync::atomic::AtomicU64>,
    /// Holds the reactor's turns back while `into_inner` takes the engine.
    pub(crate) gate: Arc<crate::gate::Gate>,
}

impl<T: Target> Inner<T> {
    pub(crate) fn new(target: T, cfg: AsyncConfig) -> Inner<T> {
        let core = target.core();
        let abandoned_deadline = cfg
            .abandoned_deadline
            .unwrap_or(core.config().drain_deadline);
        Inner {
            registry: target.registry().clone(),
            peers: core.peers(),
            target: Mutex::new(target),
            cfg,
            abandoned_deadline,
            orphans: Mutex::new(Vec::new()),
            has_orphans: AtomicBool::new(false),
            poke: Poke(Arc::new(Notify::new())),
            fd_wakes: Arc::default(),
            gate: Arc::default(),
        }
    }

    fn settle_orphans(&self, core: &ChannelCore) {
        if self.has_orphans.swap(false, SeqCst) {
            for t in self.orphans.lock().drain(..) {
                core.abandon_owned(t);
            }
        }
    }
}

impl<T: Target> Engine for Inner<T> {
    fn with_core(&self, f: &mut dyn FnMut(&ChannelCore)) {
        let target = self.target.lock();
        let core = target.core();
        self.settle_orphans(core);
        f(core);
    }

    fn abandon(&self, t: OwnedTicket) {
        match self.target.try_lock() {
            Some(target) => target.core().abandon_owned(t),
            None => {
                self.orphans.lock().push(t);
                self.has_orphans.store(true, SeqCst);
                self.poke.notify_one();
            }
        }
    }

    fn own_looks(&self) -> usize {
        match self.cfg.wake {
            Wake::BusyPoll => crate::op::BUSY_LOOKS,
            // A short exchange's answer is caught by the future itself,
            // without a trip through the reactor task (a task switch and
            // a wake-up per message).
            Wake::Kernel { spin } if !spin.is_zero() => crate::op::KERNEL_LOOKS,
            Wake::Kernel { .. } => 1,
        }
    }

    fn turn(&self) -> (usize, Option<Duration>) {
        let target = self.target.lock();
        let core = target.core();
        self.settle_orphans(core);
        let mut got = 0;
        for _ in 0..ROUNDS {
            match core.progress() {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) => {
                    tracing::warn!("ferrovia-async reactor: polling the transport: {e}");
                    break;
                }
            }
        }
        (got, core.flush_abandoned(self.abandoned_deadline))
    }

    fn arm_and_poll(&self) -> usize {
        let target = self.target.lock();
        let core = target.core();
        if let Err(e) = core.arm() {
            tracing::warn!("ferrovia-async reactor: arming the event fd: {e}");
        }
        core.progress().unwrap_or(0)
    }

    fn ack(&self) {
        let target = self.target.lock();
        if let Err(e) = target.core().ack_events() {
            tracing::warn!("ferrovia-async reactor: consuming events: {e}");
        }
    }
}

/// The reactor's wake-up, which wakes it once more when the engine goes.
pub(crate) struct Poke(pub(crate) Arc<Notify>);

impl std::ops::Deref for Poke {
    type Target = Notify;

    fn deref(&self) -> &Notify {
        &self.0
    }
}

impl Drop for Poke {
    fn drop(&mut self) {
        // The reactor holds only a weak reference to the engine: it sees
        // it gone and ends.
        self.0.notify_one();
    }
}

impl<T: Target> Inner<T> {
    /// The target, once nothing else holds the engine.
    pub(crate) fn into_target(self) -> T {
        self.target.into_inner()
    }
}
