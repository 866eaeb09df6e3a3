//! The engine: the UCX worker, its endpoints, remote keys and requests,
//! owned by the progress thread and turned under one lock by it or by a
//! user thread that polls. User threads hand it commands through a
//! lock-free queue and read completions from another. Control messages
//! (keys, revocations, goodbyes) are `control_plane`'s.
//!
//! Buffers named by an operation stay in use until UCX reports the
//! operation complete (or cancelled); the channel core's scopes wait for
//! that report, so dropping a handle never frees memory UCX still touches.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam::queue::SegQueue;
use ferrovia_channel::{Completion, MAX_ELEMENTS, OpKind, RecvOp, SendOp};
use ferrovia_types::{AccessFlags, Sge};
use parking_lot::{Condvar, Mutex};

use crate::context::{ContextHandle, UcxContext};
use crate::control::{AM_ID, Control};
use crate::error::{UcxError, check};
use crate::events::{self, Event};
use crate::ffi;
use crate::keys::KeyDirectory;
use crate::peer::{Peer, RemoteKey};
use crate::revoke::Revocation;
use crate::status::{REMOTE_ACCESS, Started, started, vendor_err, wc_status};
use crate::tag;

mod control_plane;

/// How long the thread keeps polling after the last activity before it
/// sleeps on the worker's event fd: long enough to catch a ping-pong reply.
const SPIN: Duration = Duration::from_micros(200);
/// How long the progress thread stays out of the way once a user thread
/// took a turn; it looks again after that.
const STAND_BACK: Duration = Duration::from_micros(500);
/// How long shutdown waits for endpoints to close gracefully.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// What user threads ask of the progress thread.
pub(crate) enum Cmd {
    Send {
        peer: usize,
        op: SendOp,
    },
    Recv {
        peer: usize,
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
    /// Raw bytes on the control channel (tests of the malformed path).
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
    sleeping: AtomicBool,
    pub(crate) waiters: AtomicUsize,
    pub(crate) lock: Mutex<()>,
    pub(crate) cv: Condvar,
    pub(crate) malformed: AtomicU64,
    pub(crate) alive: AtomicBool,
    /// Turns user threads took since the progress thread last looked.
    pub(crate) user_turns: AtomicU64,
    worker: AtomicPtr<ffi::ucp_worker>,
    /// The transport's event fd, signalled on delivery when armed.
    pub(crate) events: crate::notify::Notifier,
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
            alive: AtomicBool::new(true),
            user_turns: AtomicU64::new(0),
            worker: AtomicPtr::new(null_mut()),
            events: crate::notify::Notifier::new(),
        }
    }

    /// Queues a command and wakes the thread if it sleeps.
    pub(crate) fn send(&self, cmd: Cmd) {
        self.cmds.push(cmd);
        self.wake(false);
    }

    pub(crate) fn wake(&self, always: bool) {
        if always || self.sleeping.load(SeqCst) {
            let w = self.worker.load(SeqCst);
            if !w.is_null() {
                // SAFETY: the worker lives until the progress thread exits,
                // which only happens after `Shutdown`, sent by the
                // transport's `Drop` (no other user call can run then);
                // ucp_worker_signal may be called from any thread.
                unsafe { ffi::ucp_worker_signal(w) };
            }
        }
    }

    fn complete(&self, c: Completion) {
        self.done.push(c);
        self.events.signal();
    }

    fn notify(&self) {
        self.events.signal();
        if self.waiters.load(SeqCst) > 0 {
            let _g = self.lock.lock();
            self.cv.notify_all();
        }
    }
}

// Token classes: what a `user_data` names. Layout: class in bits 56..64,
// peer in 32..56, sequence number or slot in 0..32.
const PART: u64 = 1;
const FLUSH: u64 = 2;
const RECV: u64 = 3;
const NOTIFY: u64 = 4;
const CTRL: u64 = 5;
const CLOSE: u64 = 6;
const EP_ERROR: u64 = 7;
const REVOKE_FLUSH: u64 = 9;
const GOODBYE_FLUSH: u64 = 10;
/// A control message arrived.
pub(crate) const CONTROL_TOKEN: u64 = 8 << 56;
/// The most peers a token can name.
pub(crate) const MAX_PEERS: usize = 1 << 24;

fn token(class: u64, peer: usize, index: u32) -> u64 {
    class << 56 | (peer as u64) << 32 | u64::from(index)
}

fn split(token: u64) -> (u64, usize, u32) {
    (
        token >> 56,
        ((token >> 32) & 0xff_ffff) as usize,
        token as u32,
    )
}

pub(crate) fn ep_error_token(peer: usize) -> u64 {
    token(EP_ERROR, peer, 0)
}

fn user_data(token: u64) -> *mut c_void {
    token as usize as *mut c_void
}

/// A posted receive.
struct RecvState {
    peer: usize,
    wr_id: u64,
    /// The request while UCX holds it; NULL once completed or cancelled.
    request: *mut c_void,
    iov: Option<Box<[ffi::ucp_dt_iov; MAX_ELEMENTS]>>,
}

/// Buffer, count and datatype for `sges`, using `iov` for several.
fn layout(
    sges: &[Sge],
    iov: &mut Option<Box<[ffi::ucp_dt_iov; MAX_ELEMENTS]>>,
) -> (*mut c_void, usize, ffi::ucp_datatype_t) {
    const CONTIG_BYTES: ffi::ucp_datatype_t =
        (1 << ffi::UCP_DATATYPE_SHIFT) | ffi::UCP_DATATYPE_CONTIG as ffi::ucp_datatype_t;
    match sges {
        [] => (null_mut(), 0, CONTIG_BYTES),
        [one] => (
            one.addr() as usize as *mut c_void,
            one.length() as usize,
            CONTIG_BYTES,
        ),
        many => {
            let v = iov.insert(Box::new([ffi::ucp_dt_iov::default(); MAX_ELEMENTS]));
            for (slot, s) in v.iter_mut().zip(many) {
                slot.buffer = s.addr() as usize as *mut c_void;
                slot.length = s.length() as usize;
            }
            (
                v.as_mut_ptr().cast(),
                many.len(),
                ffi::UCP_DATATYPE_IOV as ffi::ucp_datatype_t,
            )
        }
    }
}

fn send_param(token: u64) -> ffi::ucp_request_param_t {
    let mut p = ffi::ucp_request_param_t {
        op_attr_mask: ffi::UCP_OP_ATTR_FIELD_CALLBACK | ffi::UCP_OP_ATTR_FIELD_USER_DATA,
        user_data: user_data(token),
        ..Default::default()
    };
    p.cb.send = Some(events::send_done);
    p
}

/// Records the outcome of an `*_nbx` call that completed or failed inside
/// the call (no callback runs for those).
fn record(token: u64, r: ffi::ucs_status_ptr_t) -> Started {
    let s = started(r);
    match s {
        Started::Done => events::push(Event::new(token, ffi::UCS_OK)),
        Started::Failed(st) => events::push(Event::new(token, st)),
        Started::Pending(_) => {}
    }
    s
}

pub(crate) struct Engine {
    worker: ffi::ucp_worker_h,
    efd: i32,
    shared: Arc<Shared>,
    dir: Arc<KeyDirectory>,
    me: usize,
    peers: Vec<Peer>,
    recvs: Vec<Option<RecvState>>,
    free_recvs: Vec<u32>,
    ctrl: std::collections::HashMap<u32, Vec<u8>>,
    next_ctrl: u32,
    closing: usize,
    dirty: Vec<usize>,
    is_dirty: Vec<bool>,
    dead_rkeys: Vec<ffi::ucp_rkey_h>,
    cp: control_plane::ControlPlane,
    scratch: Vec<Event>,
    shutdown: bool,
    /// Endpoints use peer error handling (not every UCX transport has it).
    detect_failures: bool,
    /// After a panic: the worker is not destroyed.
    leak: bool,
    // Keeps the context alive while the worker exists.
    _ctx: Arc<ContextHandle>,
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
    let handle = thread::Builder::new()
        .name("ferrovia-ucx".into())
        .spawn(move || progress_thread(cell, shared))
        .map_err(|e| UcxError::ProgressThread(format!("cannot spawn: {e}")))?;
    Ok((handle, engine, address))
}

/// Turns the engine on this thread if nobody else is (a user thread that
/// posts or polls, or one waiting for a revocation); whether it did.
pub(crate) fn turn_inline(engine: &EngineCell, shared: &Shared) -> bool {
    let Some(mut e) = engine.try_lock() else {
        return false;
    };
    if e.is_shut_down() {
        return false;
    }
    shared.user_turns.fetch_add(1, SeqCst);
    let turned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e.turn()));
    if turned.is_err() {
        log::error!("UCX progress panicked on a user thread; the transport is dead");
        e.poison();
        shared.alive.store(false, SeqCst);
    }
    true
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
            // waits for this thread to deliver.
            if shared.user_turns.swap(0, SeqCst) > 0 && !shared.events.armed() {
                thread::sleep(STAND_BACK);
                last_activity = Instant::now();
                continue;
            }
            let busy = {
                let mut e = engine.lock();
                let busy = e.turn();
                if e.shutdown {
                    e.close_all();
                    return;
                }
                busy
            };
            if busy {
                last_activity = Instant::now();
            } else if last_activity.elapsed() < SPIN {
                thread::yield_now();
            } else {
                let efd = engine.lock().arm();
                if let Some(fd) = efd {
                    let mut p = libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd.
                    unsafe { libc::poll(&mut p, 1, 100) };
                }
                shared.sleeping.store(false, SeqCst);
                last_activity = Instant::now();
            }
        }
    }));
    if outcome.is_err() {
        log::error!("the UCX progress thread panicked; the transport is dead");
        // Requests in flight may still reference the worker: leak it
        // rather than destroy it under them.
        engine.lock().leak = true;
    }
    shared.alive.store(false, SeqCst);
    shared.notify();
}

impl Engine {
    fn new(
        ctx: Arc<ContextHandle>,
        dir: Arc<KeyDirectory>,
        shared: Arc<Shared>,
        detect_failures: bool,
    ) -> Result<(Engine, Vec<u8>), UcxError> {
        let params = ffi::ucp_worker_params_t {
            field_mask: u64::from(ffi::UCP_WORKER_PARAM_FIELD_THREAD_MODE),
            // The progress thread and polling user threads take turns under
            // the engine's lock.
            thread_mode: ffi::UCS_THREAD_MODE_SERIALIZED,
            ..Default::default()
        };
        let mut worker = null_mut();
        // SAFETY: valid context, params and out-pointer.
        check("ucp_worker_create", unsafe {
            ffi::ucp_worker_create(ctx.raw, &params, &mut worker)
        })?;
        let mut engine = Engine {
            worker,
            efd: -1,
            shared,
            dir,
            me: 0,
            peers: Vec::new(),
            recvs: Vec::new(),
            free_recvs: Vec::new(),
            ctrl: Default::default(),
            next_ctrl: 0,
            closing: 0,
            dirty: Vec::new(),
            is_dirty: Vec::new(),
            dead_rkeys: Vec::new(),
            cp: Default::default(),
            scratch: Vec::new(),
            shutdown: false,
            detect_failures,
            leak: false,
            _ctx: ctx,
        };
        // From here on `engine`'s Drop destroys the worker on error.
        let address = engine.address()?;
        let mut efd = -1;
        // SAFETY: valid worker (created with the WAKEUP feature) and
        // out-pointer.
        check("ucp_worker_get_efd", unsafe {
            ffi::ucp_worker_get_efd(worker, &mut efd)
        })?;
        engine.efd = efd;
        let am = ffi::ucp_am_handler_param_t {
            field_mask: u64::from(
                ffi::UCP_AM_HANDLER_PARAM_FIELD_ID | ffi::UCP_AM_HANDLER_PARAM_FIELD_CB,
            ),
            id: AM_ID,
            cb: Some(events::control_received),
            ..Default::default()
        };
        // SAFETY: valid worker and parameters; the callback is a plain
        // function that outlives the worker.
        check("ucp_worker_set_am_recv_handler", unsafe {
            ffi::ucp_worker_set_am_recv_handler(worker, &am)
        })?;
        engine.shared.worker.store(worker, SeqCst);
        Ok((engine, address))
    }

    fn address(&self) -> Result<Vec<u8>, UcxError> {
        let mut addr = null_mut();
        let mut len = 0usize;
        // SAFETY: valid worker and out-pointers.
        check("ucp_worker_get_address", unsafe {
            ffi::ucp_worker_get_address(self.worker, &mut addr, &mut len)
        })?;
        // SAFETY: UCX returned `len` readable bytes at `addr`.
        let bytes = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len) }.to_vec();
        // SAFETY: released once, after copying.
        unsafe { ffi::ucp_worker_release_address(self.worker, addr) };
        Ok(bytes)
    }

    /// One round: commands, `ucp_worker_progress`, events. Whether
    /// anything happened.
    pub(crate) fn turn(&mut self) -> bool {
        if self.shutdown {
            return false;
        }
        let mut busy = self.drain_commands();
        if self.shutdown {
            return busy;
        }
        busy |= self.expire_revocations();
        // SAFETY: the worker is used under the engine's lock only.
        busy |= unsafe { ffi::ucp_worker_progress(self.worker) } != 0;
        busy |= self.handle_events();
        busy
    }

    /// Prepares to sleep: marks the thread sleeping and arms the worker's
    /// event fd; the fd to wait on, or `None` when there is work already.
    fn arm(&mut self) -> Option<i32> {
        self.shared.sleeping.store(true, SeqCst);
        if self.shared.cmds.is_empty() {
            // SAFETY: the worker is used under the engine's lock only.
            let armed = unsafe { ffi::ucp_worker_arm(self.worker) } == ffi::UCS_OK;
            if armed && self.shared.cmds.is_empty() {
                return Some(self.efd);
            }
        }
        self.shared.sleeping.store(false, SeqCst);
        None
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown
    }

    /// Marks the engine unusable after a panic: its worker is leaked.
    pub(crate) fn poison(&mut self) {
        self.leak = true;
        self.shutdown = true;
    }

    fn mark(&mut self, peer: usize) {
        if let Some(d) = self.is_dirty.get_mut(peer)
            && !*d
        {
            *d = true;
            self.dirty.push(peer);
        }
    }

    fn drain_commands(&mut self) -> bool {
        let mut any = false;
        while let Some(cmd) = self.shared.cmds.pop() {
            any = true;
            match cmd {
                Cmd::Send { peer, op } => self.enqueue(peer, op),
                Cmd::Recv { peer, op } => self.post_recv(peer, op),
                Cmd::Flush { peer } => self.fail_peer(peer, ffi::UCS_ERR_CANCELED),
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

    fn connect(&mut self, me: usize, addresses: &[Vec<u8>]) -> Result<(), UcxError> {
        if !self.peers.is_empty() {
            return Err(UcxError::AlreadyConnected);
        }
        if addresses.len() > MAX_PEERS.min(tag::MAX_PEERS) || me >= addresses.len() {
            return Err(UcxError::BadPeers {
                me,
                peers: addresses.len(),
            });
        }
        let mut eps = Vec::with_capacity(addresses.len());
        for (j, a) in addresses.iter().enumerate() {
            let mut status = self.create_ep(j, a);
            if status.as_ref().err() == Some(&ffi::UCS_ERR_UNREACHABLE) && self.detect_failures {
                // Shared memory and self have no peer failure handling in
                // UCX 1.13: without it a dead peer surfaces as the scope's
                // timeout and flush instead.
                log::info!(
                    "ucx: no transport to peer {j} detects peer failure; continuing without"
                );
                self.detect_failures = false;
                status = self.create_ep(j, a);
            }
            match status {
                Ok(ep) => eps.push(ep),
                Err(s) => {
                    for ep in eps {
                        self.close_ep(ep, true);
                    }
                    return Err(crate::error::status_error("ucp_ep_create", s));
                }
            }
        }
        self.me = me;
        self.peers = eps.into_iter().map(Peer::new).collect();
        self.is_dirty = vec![false; self.peers.len()];
        log::debug!("ucx: rank {me} connected to {} endpoints", self.peers.len());
        Ok(())
    }

    fn create_ep(
        &mut self,
        peer: usize,
        address: &[u8],
    ) -> Result<ffi::ucp_ep_h, ffi::ucs_status_t> {
        let mut params = ffi::ucp_ep_params_t {
            field_mask: u64::from(ffi::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS),
            address: address.as_ptr().cast(),
            ..Default::default()
        };
        if self.detect_failures {
            params.field_mask |= u64::from(
                ffi::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | ffi::UCP_EP_PARAM_FIELD_ERR_HANDLER,
            );
            params.err_mode = ffi::UCP_ERR_HANDLING_MODE_PEER;
            params.err_handler.cb = Some(events::endpoint_failed);
            params.err_handler.arg = peer as *mut c_void;
        }
        let mut ep = null_mut();
        // SAFETY: valid worker, params and out-pointer; UCX copies the
        // address during the call.
        let status = unsafe { ffi::ucp_ep_create(self.worker, &params, &mut ep) };
        if status == ffi::UCS_OK {
            Ok(ep)
        } else {
            Err(status)
        }
    }

    fn enqueue(&mut self, peer: usize, op: SendOp) {
        let Some(p) = self.peers.get_mut(peer) else {
            self.shared
                .complete(send_completion(op.wr_id, ffi::UCS_ERR_INVALID_PARAM));
            return;
        };
        p.push(op);
        self.mark(peer);
    }

    /// Issues what can be issued of `peer`'s queue, in order.
    fn pump(&mut self, peer: usize) {
        loop {
            let p = &mut self.peers[peer];
            if let Some(status) = p.failed {
                let from = p.cursor;
                for e in p.queue.iter_mut().skip(from) {
                    e.fail(status);
                }
                p.cursor = p.queue.len();
                return;
            }
            if p.gate {
                return;
            }
            let cursor = p.cursor;
            let Some(e) = p.queue.get_mut(cursor) else {
                return;
            };
            match e.op.kind {
                // Not offered yet (`atomics()` is false, so the core
                // refuses them before posting).
                OpKind::FetchAdd | OpKind::CompareSwap => e.fail(ffi::UCS_ERR_UNSUPPORTED),
                OpKind::Send => {
                    if p.unflushed > 0 {
                        return;
                    }
                    self.issue_send(peer, cursor);
                }
                kind @ (OpKind::Write | OpKind::Read) => {
                    let key = e.op.rkey;
                    match p.keys.get(&key) {
                        None => {
                            p.keys.insert(key, RemoteKey::Requested);
                            let me = self.me as u32;
                            self.send_control(peer, Control::Request { from: me, key }.encode());
                            return;
                        }
                        Some(RemoteKey::Requested) => return,
                        Some(RemoteKey::Missing | RemoteKey::Revoked) => e.fail(REMOTE_ACCESS),
                        Some(RemoteKey::Ready { rkey, info }) => {
                            let need = if kind == OpKind::Write {
                                AccessFlags::REMOTE_WRITE
                            } else {
                                AccessFlags::REMOTE_READ
                            };
                            let total = e.op.sges().iter().map(|s| u64::from(s.length())).sum();
                            match info.translate(e.op.remote_addr, total, need) {
                                None => e.fail(REMOTE_ACCESS),
                                Some(addr) => {
                                    if kind == OpKind::Read && p.unflushed > 0 {
                                        return;
                                    }
                                    let rkey = *rkey;
                                    self.issue_rma(peer, cursor, rkey, addr);
                                }
                            }
                        }
                    }
                }
            }
            self.peers[peer].cursor += 1;
        }
    }

    fn issue_send(&mut self, peer: usize, idx: usize) {
        let me = self.me;
        let p = &mut self.peers[peer];
        let ep = p.ep;
        let e = &mut p.queue[idx];
        let t = token(PART, peer, e.seq);
        e.issued = true;
        e.outstanding = 1;
        let tag = tag::send_tag(me, e.op.imm, false);
        let sges = e.op.sges;
        let n = e.op.num_sge;
        let (buf, count, dt) = layout(&sges[..n], &mut e.iov);
        let mut param = send_param(t);
        param.op_attr_mask |= ffi::UCP_OP_ATTR_FIELD_DATATYPE;
        param.datatype = dt;
        // SAFETY: the endpoint is live (the peer has not failed); the
        // buffers stay valid until the op completes (the caller's
        // contract), and the iovec lives in the entry until then.
        let r = unsafe { ffi::ucp_tag_send_nbx(ep, buf, count, tag, &param) };
        record(t, r);
    }

    fn issue_rma(&mut self, peer: usize, idx: usize, rkey: ffi::ucp_rkey_h, addr: u64) {
        let p = &mut self.peers[peer];
        let ep = p.ep;
        let e = &mut p.queue[idx];
        let t = token(PART, peer, e.seq);
        e.issued = true;
        let write = e.is_write();
        let mut remote = addr;
        for s in e.op.sges() {
            let param = send_param(t);
            let (local, len) = (s.addr() as usize as *mut c_void, s.length() as usize);
            // SAFETY: live endpoint and unpacked rkey; the range was checked
            // against the peer's registration; the local buffer stays valid
            // until the op completes (the caller's contract).
            let r = unsafe {
                if write {
                    ffi::ucp_put_nbx(ep, local, len, remote, rkey, &param)
                } else {
                    ffi::ucp_get_nbx(ep, local, len, remote, rkey, &param)
                }
            };
            e.outstanding += 1;
            record(t, r);
            remote += len as u64;
        }
        if write {
            let (seq, imm) = (e.seq, e.op.imm.is_some());
            p.unflushed += 1;
            p.flush_needed = true;
            p.last_write = seq;
            p.gate |= imm;
        }
    }

    fn flush_if_needed(&mut self, peer: usize) {
        let p = &mut self.peers[peer];
        if !p.flush_needed || p.failed.is_some() {
            return;
        }
        p.flush_needed = false;
        let t = token(FLUSH, peer, p.last_write);
        let param = send_param(t);
        // SAFETY: live endpoint owned by this thread.
        let r = unsafe { ffi::ucp_ep_flush_nbx(p.ep, &param) };
        record(t, r);
    }

    fn notify(&mut self, peer: usize, seq: u32) {
        let me = self.me;
        let p = &mut self.peers[peer];
        let ep = p.ep;
        let Some(e) = p.entry_mut(seq) else { return };
        let t = token(NOTIFY, peer, seq);
        let tag = tag::send_tag(me, e.op.imm, true);
        let param = send_param(t);
        // SAFETY: live endpoint; a zero-length message names no buffer.
        let r = unsafe { ffi::ucp_tag_send_nbx(ep, null_mut(), 0, tag, &param) };
        p.gate = false;
        record(t, r);
    }

    fn post_recv(&mut self, peer: usize, op: RecvOp) {
        match self.peers.get(peer) {
            None => {
                return self
                    .shared
                    .complete(send_completion(op.wr_id, ffi::UCS_ERR_INVALID_PARAM));
            }
            Some(p) if p.failed.is_some() => {
                return self
                    .shared
                    .complete(send_completion(op.wr_id, ffi::UCS_ERR_CANCELED));
            }
            Some(_) => {}
        }
        let slot = match self.free_recvs.pop() {
            Some(s) => s,
            None => {
                self.recvs.push(None);
                (self.recvs.len() - 1) as u32
            }
        };
        let state = self.recvs[slot as usize].insert(RecvState {
            peer,
            wr_id: op.wr_id,
            request: null_mut(),
            iov: None,
        });
        let (buf, count, dt) = layout(op.sges(), &mut state.iov);
        let t = token(RECV, peer, slot);
        let (tag, mask) = tag::recv_match(peer);
        let mut info = ffi::ucp_tag_recv_info_t::default();
        let mut param = ffi::ucp_request_param_t {
            op_attr_mask: ffi::UCP_OP_ATTR_FIELD_CALLBACK
                | ffi::UCP_OP_ATTR_FIELD_USER_DATA
                | ffi::UCP_OP_ATTR_FIELD_DATATYPE
                | ffi::UCP_OP_ATTR_FIELD_RECV_INFO
                // UCX 1.13 can complete a receive of an unexpected eager
                // message inside the call without filling `recv_info`
                // (sender tag 0: the immediate lost); the callback always
                // has it.
                | ffi::UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
            user_data: user_data(t),
            datatype: dt,
            ..Default::default()
        };
        param.cb.recv = Some(events::recv_done);
        param.recv_info.tag_info = &mut info;
        // SAFETY: valid worker; the buffers stay valid until the receive
        // completes or is cancelled (the caller's contract); `info` outlives
        // the call, which is the only time UCX writes it.
        let r = unsafe { ffi::ucp_tag_recv_nbx(self.worker, buf, count, tag, mask, &param) };
        match started(r) {
            Started::Done => {
                let mut ev = Event::new(t, ffi::UCS_OK);
                ev.len = info.length;
                ev.tag = info.sender_tag;
                events::push(ev);
            }
            Started::Pending(req) => state.request = req,
            Started::Failed(s) => events::push(Event::new(t, s)),
        }
    }

    /// Sends a control message to `peer`; the bytes stay here until UCX
    /// is done with them.
    fn send_control(&mut self, peer: usize, bytes: Vec<u8>) {
        let Some(p) = self.peers.get(peer) else {
            return;
        };
        if p.failed.is_some() || p.ep.is_null() {
            return;
        }
        let ep = p.ep;
        let id = self.next_ctrl;
        self.next_ctrl = self.next_ctrl.wrapping_add(1);
        let t = token(CTRL, peer, id);
        let buf = self.ctrl.entry(id).insert_entry(bytes);
        let mut param = send_param(t);
        param.op_attr_mask |= ffi::UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = ffi::UCP_AM_SEND_FLAG_EAGER;
        // SAFETY: live endpoint; the header bytes stay in `self.ctrl` until
        // the completion event removes them.
        let r = unsafe {
            ffi::ucp_am_send_nbx(
                ep,
                AM_ID,
                buf.get().as_ptr().cast(),
                buf.get().len(),
                null_mut(),
                0,
                &param,
            )
        };
        record(t, r);
    }

    /// Acts on everything UCX reported; whether there was anything.
    fn handle_events(&mut self) -> bool {
        let mut any = false;
        let mut completed = false;
        loop {
            let mut batch = std::mem::take(&mut self.scratch);
            events::take(&mut batch);
            if batch.is_empty() && self.dirty.is_empty() {
                self.scratch = batch;
                break;
            }
            any = true;
            for ev in batch.drain(..) {
                completed |= self.on_event(ev);
            }
            self.scratch = batch;
            while let Some(peer) = self.dirty.pop() {
                self.is_dirty[peer] = false;
                self.pump(peer);
                self.flush_if_needed(peer);
                let shared = &self.shared;
                self.peers[peer].retire(|e| {
                    if e.op.signaled || e.status != ffi::UCS_OK {
                        shared.complete(send_completion(e.op.wr_id, e.status));
                        completed = true;
                    }
                });
            }
        }
        if completed {
            self.shared.notify();
        }
        any
    }

    /// Applies one event; whether it produced a completion directly.
    fn on_event(&mut self, ev: Event) -> bool {
        let (class, peer, index) = split(ev.token);
        match class {
            PART | NOTIFY => {
                if let Some(e) = self.peers.get_mut(peer).and_then(|p| p.entry_mut(index)) {
                    if class == PART {
                        e.outstanding = e.outstanding.saturating_sub(1);
                    } else {
                        e.notified = true;
                    }
                    if ev.status != ffi::UCS_OK {
                        e.fail(ev.status);
                    }
                    self.mark(peer);
                }
            }
            FLUSH => {
                if let Some(p) = self.peers.get_mut(peer) {
                    let due = p.flushed(index, ev.status);
                    for seq in due {
                        self.notify(peer, seq);
                    }
                    self.mark(peer);
                }
            }
            RECV => return self.on_recv(index, &ev),
            CTRL => {
                self.ctrl.remove(&index);
                if ev.status != ffi::UCS_OK {
                    log::debug!(
                        "ucx: control message to {peer} failed: status {}",
                        ev.status
                    );
                }
            }
            CLOSE => self.closing = self.closing.saturating_sub(1),
            REVOKE_FLUSH => self.revoke_flushed(peer, index, ev.status),
            GOODBYE_FLUSH => self.goodbye_flushed(peer, ev.status),
            EP_ERROR => {
                log::warn!(
                    "ucx: endpoint to peer {peer} failed (ucs_status_t {}); failing its work",
                    ev.status
                );
                self.fail_peer(peer, ev.status);
            }
            _ if ev.token == CONTROL_TOKEN => self.on_control(ev.data.as_deref().unwrap_or(&[])),
            _ => {}
        }
        false
    }

    fn on_recv(&mut self, slot: u32, ev: &Event) -> bool {
        let Some(state) = self.recvs.get_mut(slot as usize).and_then(Option::take) else {
            return false;
        };
        self.free_recvs.push(slot);
        let ok = ev.status == ffi::UCS_OK;
        let write = ok && tag::is_write_imm(ev.tag);
        self.shared.complete(Completion {
            wr_id: state.wr_id,
            status: wc_status(ev.status),
            vendor_err: vendor_err(ev.status),
            byte_len: if ok && !write { ev.len as u32 } else { 0 },
            imm: if ok { tag::imm_of(ev.tag) } else { None },
            peer: None,
        });
        true
    }

    /// Stops all work towards `peer`: it is told (if it can still hear),
    /// its endpoint is closed, everything outstanding completes with an
    /// error.
    fn fail_peer(&mut self, peer: usize, status: ffi::ucs_status_t) {
        if self.peers.get(peer).is_none_or(|p| p.failed.is_some()) {
            return;
        }
        self.say_goodbye(peer);
        let p = &mut self.peers[peer];
        p.fail(status);
        let ep = std::mem::replace(&mut p.ep, null_mut());
        for (_, k) in p.keys.drain() {
            if let RemoteKey::Ready { rkey, .. } = k {
                self.dead_rkeys.push(rkey);
            }
        }
        for r in self.recvs.iter_mut().flatten() {
            if r.peer == peer && !r.request.is_null() {
                let req = std::mem::replace(&mut r.request, null_mut());
                // SAFETY: a receive request UCX still holds; its callback
                // reports the cancellation.
                unsafe { ffi::ucp_request_cancel(self.worker, req) };
            }
        }
        if !ep.is_null() {
            self.close_ep(ep, true);
        }
        self.mark(peer);
        self.peer_closed(peer);
    }

    fn close_ep(&mut self, ep: ffi::ucp_ep_h, force: bool) {
        let t = token(CLOSE, 0, 0);
        let mut param = send_param(t);
        param.op_attr_mask |= ffi::UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = if force {
            ffi::UCP_EP_CLOSE_FLAG_FORCE
        } else {
            0
        };
        // SAFETY: an endpoint of this worker, closed once.
        let r = unsafe { ffi::ucp_ep_close_nbx(ep, &param) };
        if let Started::Pending(_) = started(r) {
            self.closing += 1;
        }
    }
}

// SAFETY: the UCX handles inside are used by one thread at a time, under
// the engine's mutex (the worker is created SERIALIZED); the raw buffers
// they name belong to operations whose owners wait for their completion.
unsafe impl Send for Engine {}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.worker.store(null_mut(), SeqCst);
        if self.leak {
            return;
        }
        // SAFETY: created in `new`, destroyed once; endpoints were closed.
        unsafe { ffi::ucp_worker_destroy(self.worker) };
    }
}

/// The completion of a send-queue op (or of any op refused before UCX saw
/// it): no bytes, no immediate.
fn send_completion(wr_id: u64, status: ffi::ucs_status_t) -> Completion {
    Completion {
        wr_id,
        status: wc_status(status),
        vendor_err: vendor_err(status),
        byte_len: 0,
        imm: None,
        peer: None,
    }
}
