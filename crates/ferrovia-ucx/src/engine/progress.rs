//! The progress thread, the commands user threads queue when the engine
//! is taken, the completions published for threads that did not turn it,
//! and `with_engine`: the engine used inline by whoever finds it free.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam::queue::SegQueue;
use ferrovia_channel::transport::{Completion, RecvOp, SendOp};
use parking_lot::{Condvar, Mutex};

use super::Engine;
use crate::context::UcxContext;
use crate::error::UcxError;
use crate::keys::KeyDirectory;
use crate::revoke::Revocation;
use crate::ucp::{Status, WorkerSlot};

/// How long the thread keeps polling after the last activity before it
/// sleeps on the worker's event fd: long enough to catch a ping-pong reply.
const SPIN: Duration = Duration::from_micros(200);
/// How long the progress thread stays out of the way once a user thread
/// took a turn; it looks again after that, or as soon as an event loop
/// arms the transport's event fd (which unparks it).
const STAND_BACK: Duration = Duration::from_micros(500);
/// While sends UCX holds are in flight, how long the thread keeps turning
/// after the last activity before it naps: a send queued behind a full
/// shared-memory FIFO finishes through progress alone, and no event of
/// the worker's fd says the FIFO drained.
const IN_FLIGHT_SPIN: Duration = Duration::from_millis(5);
/// The nap while sends are in flight (the fd still wakes it for arrivals).
const IN_FLIGHT_NAP_MS: i32 = 1;

/// What user threads ask of whoever turns the engine next (a post that
/// found the engine taken, or what only a turn does).
pub(crate) enum Cmd {
    Send {
        peer: usize,
        op: SendOp,
    },
    Recv {
        peer: usize,
        op: RecvOp,
    },
    /// A receive for the shared pool.
    RecvAny {
        op: RecvOp,
    },
    Flush {
        peer: usize,
    },
    Connect {
        me: usize,
        addresses: Vec<Vec<u8>>,
        reply: mpsc::Sender<Result<(), UcxError>>,
    },
    /// Raw bytes on the control channel (tests of the malformed path):
    /// sent only by the `test-hooks` feature's `send_raw_control`.
    #[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
    RawControl {
        peer: usize,
        bytes: Vec<u8>,
    },
    /// A deregistered key to revoke at the peers that fetched it.
    Revoke(Arc<Revocation>),
    Shutdown,
}

/// State shared between user threads and the progress thread.
pub(crate) struct Shared {
    pub(crate) cmds: SegQueue<Cmd>,
    pub(crate) done: SegQueue<Completion>,
    pub(super) sleeping: AtomicBool,
    pub(crate) waiters: AtomicUsize,
    pub(crate) lock: Mutex<()>,
    pub(crate) cv: Condvar,
    pub(crate) malformed: AtomicU64,
    /// Messages of a replaced or broken connection, dropped.
    pub(crate) stale: AtomicU64,
    pub(crate) alive: AtomicBool,
    /// A user thread took a turn since the progress thread last looked.
    pub(crate) user_turned: AtomicBool,
    /// Posts that went through the command queue (tests).
    pub(crate) queued_posts: AtomicU64,
    pub(super) worker: WorkerSlot,
    /// The transport's event fd, signalled on publication when armed.
    pub(crate) events: crate::notify::Notifier,
    /// The progress thread, to unpark from its stand-back.
    progress: std::sync::OnceLock<thread::Thread>,
}

impl Shared {
    pub(crate) fn new() -> Shared {
        Shared {
            cmds: SegQueue::new(),
            done: SegQueue::new(),
            sleeping: AtomicBool::new(false),
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
            malformed: AtomicU64::new(0),
            stale: AtomicU64::new(0),
            alive: AtomicBool::new(true),
            user_turned: AtomicBool::new(false),
            queued_posts: AtomicU64::new(0),
            worker: WorkerSlot::new(),
            events: crate::notify::Notifier::new(),
            progress: std::sync::OnceLock::new(),
        }
    }

    /// Arms the transport's event fd for an event loop about to sleep on
    /// it, and calls the progress thread back from standing back: the
    /// loop's last poll took a user turn, and nobody else would progress.
    pub(crate) fn arm_events(&self) {
        self.events.arm();
        if let Some(t) = self.progress.get() {
            t.unpark();
        }
    }

    /// Queues a command and wakes the thread if it sleeps.
    pub(crate) fn send(&self, cmd: Cmd) {
        self.cmds.push(cmd);
        self.wake(false);
    }

    pub(crate) fn wake(&self, always: bool) {
        if always || self.sleeping.load(SeqCst) {
            // SAFETY: the worker lives until the progress thread exits,
            // which only happens after `Shutdown`, sent by the
            // transport's `Drop` (no other user call can run then);
            // ucp_worker_signal may be called from any thread.
            unsafe { self.worker.signal() };
        }
    }

    pub(super) fn notify(&self) {
        self.events.signal();
        if self.waiters.load(SeqCst) > 0 {
            let _g = self.lock.lock();
            self.cv.notify_all();
        }
    }
}

/// The engine, shared by the progress thread and user threads that drive
/// progress inline while they poll.
pub(crate) type EngineCell = Arc<Mutex<Engine>>;

/// Creates the worker and starts the progress thread; returns the
/// thread, the engine and the worker's address.
pub(crate) fn spawn(
    ctx: &UcxContext,
    dir: Arc<KeyDirectory>,
    shared: Arc<Shared>,
    detect_failures: bool,
) -> Result<(JoinHandle<()>, EngineCell, Vec<u8>), UcxError> {
    let (engine, address) = Engine::new(ctx.handle.clone(), dir, shared.clone(), detect_failures)?;
    let engine = Arc::new(Mutex::new(engine));
    let cell = engine.clone();
    let shared_for_park = shared.clone();
    let handle = thread::Builder::new()
        .name("ferrovia-ucx".into())
        .spawn(move || progress_thread(cell, shared))
        .map_err(|e| UcxError::ProgressThread(format!("cannot spawn: {e}")))?;
    let _ = shared_for_park.progress.set(handle.thread().clone());
    Ok((handle, engine, address))
}

/// Runs `f` on the engine on this thread if nobody else holds it and it
/// is not shut down; `None` if it could not (or `f` panicked: the
/// transport is then dead). It counts as a user turn, so the progress
/// thread stands back. Completions `f` leaves in the engine stay there for
/// this thread's next poll or wait, which take them under the lock; any
/// other thread that takes the lock publishes them.
pub(crate) fn with_engine<R>(
    engine: &EngineCell,
    shared: &Shared,
    f: impl FnOnce(&mut Engine) -> R,
) -> Option<R> {
    run_on_engine(engine, shared, true, f)
}

/// [`with_engine`] for work that does not progress the worker (the
/// direct lane's copies and CPU atomics): it leaves the progress thread
/// be, which a thread posting such ops without polling would otherwise
/// keep standing back while messages and revocations wait.
pub(crate) fn with_engine_unturned<R>(
    engine: &EngineCell,
    shared: &Shared,
    f: impl FnOnce(&mut Engine) -> R,
) -> Option<R> {
    run_on_engine(engine, shared, false, f)
}

fn run_on_engine<R>(
    engine: &EngineCell,
    shared: &Shared,
    turns: bool,
    f: impl FnOnce(&mut Engine) -> R,
) -> Option<R> {
    let mut e = engine.try_lock()?;
    if e.is_shut_down() {
        return None;
    }
    if turns {
        // A plain store (no read-modify-write on the polling path); only
        // whether it happened matters.
        shared.user_turned.store(true, Relaxed);
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut e))) {
        Ok(r) => Some(r),
        Err(_) => {
            tracing::error!("UCX progress panicked on a user thread; the transport is dead");
            e.poison();
            shared.alive.store(false, SeqCst);
            None
        }
    }
}

/// Takes completions left in the engine, if nobody holds it, without
/// turning it (not a user turn: the progress thread keeps working for a
/// thread about to sleep).
pub(crate) fn take_left(engine: &EngineCell, out: &mut [Completion]) -> usize {
    match engine.try_lock() {
        Some(mut e) => e.take_completions(out),
        None => 0,
    }
}

/// Turns the engine on this thread if nobody else is (a thread waiting
/// for a revocation); whether it did. What completes is published.
pub(crate) fn turn_inline(engine: &EngineCell, shared: &Shared) -> bool {
    with_engine(engine, shared, |e| {
        e.turn();
        e.publish();
    })
    .is_some()
}

/// The progress thread: turns the engine while there is activity, spins
/// a little after it, then sleeps on the worker's event fd (without the
/// lock, so a polling user thread can progress meanwhile).
fn progress_thread(engine: EngineCell, shared: Arc<Shared>) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut last_activity = Instant::now();
        loop {
            // A user thread busy-polling drives progress itself. Stand back
            // without arming the worker: an armed worker would wake this
            // thread on every message and preempt the poller.
            // Unless an event loop sleeps on the transport's event fd: it
            // waits for this thread to publish.
            if shared.user_turned.swap(false, Relaxed) && !shared.events.armed() {
                thread::park_timeout(STAND_BACK);
                last_activity = Instant::now();
                continue;
            }
            let (busy, in_flight) = {
                // Never wait for the lock: whoever holds it is progressing
                // (a user thread's turn marks itself, so the next look
                // stands back). Parking here would make every unlock of a
                // polling thread a system call to wake this one.
                let Some(mut e) = engine.try_lock() else {
                    thread::yield_now();
                    continue;
                };
                let busy = e.turn();
                if e.shutdown {
                    e.close_all();
                    return;
                }
                e.publish();
                (busy, e.sends_in_flight())
            };
            let idle = last_activity.elapsed();
            if busy {
                last_activity = Instant::now();
            } else if idle < SPIN || (in_flight && idle < IN_FLIGHT_SPIN) {
                thread::yield_now();
            } else {
                let efd = engine.try_lock().and_then(|mut e| e.arm());
                if let Some(fd) = efd {
                    let mut p = libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    let nap = if in_flight { IN_FLIGHT_NAP_MS } else { 100 };
                    // SAFETY: one valid pollfd.
                    unsafe { libc::poll(&mut p, 1, nap) };
                }
                shared.sleeping.store(false, SeqCst);
                last_activity = Instant::now();
            }
        }
    }));
    if outcome.is_err() {
        tracing::error!("the UCX progress thread panicked; the transport is dead");
        // Requests in flight may still reference the worker: leak it
        // rather than destroy it under them.
        engine.lock().leak = true;
    }
    shared.alive.store(false, SeqCst);
    shared.notify();
}

impl Engine {
    pub(super) fn drain_commands(&mut self) -> bool {
        // The common case, and cheaper than a pop that finds nothing.
        if self.shared.cmds.is_empty() {
            return false;
        }
        let mut any = false;
        while let Some(cmd) = self.shared.cmds.pop() {
            any = true;
            match cmd {
                Cmd::Send { peer, op } => self.enqueue(peer, op),
                Cmd::Recv { peer, op } => self.post_recv(peer, &op),
                Cmd::RecvAny { op } => self.recvs.post(self.worker, crate::tag::ANY, 0, &op),
                Cmd::Flush { peer } => self.fail_peer(peer, Status::CANCELED),
                Cmd::Connect {
                    me,
                    addresses,
                    reply,
                } => {
                    let _ = reply.send(self.connect(me, &addresses));
                }
                Cmd::RawControl { peer, bytes } => self.send_control(peer, bytes),
                Cmd::Revoke(r) => self.start_revocation(r),
                Cmd::Shutdown => {
                    self.shutdown = true;
                    return true;
                }
            }
        }
        if any {
            self.handle_events();
        }
        any
    }
}
