//! Completion queues, polled in batches, with an optional blocking wait.

use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, RawFd};
use std::ptr::{NonNull, null_mut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrovia_sys as sys;

use crate::completion::WorkCompletion;
use crate::context::{Context, ContextInner};
use crate::cq_ex::{self, CqOptions, PollPath};
use crate::error::{Result, VerbsError, check, last_errno, lib, loaded, null_error};

/// The most fds [`CompletionQueue::wait_or`] sleeps on: the completion
/// channel's and 15 others (more are not watched).
const MAX_WAIT_FDS: usize = 16;

/// A completion queue (`struct ibv_cq`). Cheap to clone.
///
/// Created with [`CompletionQueue::with_channel`] it also owns a completion
/// channel and offers [`CompletionQueue::wait`], which sleeps on the
/// channel's fd instead of spinning.
#[derive(Clone)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

pub(crate) struct CqInner {
    pub(crate) cq: NonNull<sys::ibv_cq>,
    /// The extended view, when polled with `ibv_start_poll`.
    ex: Option<NonNull<sys::ibv_cq_ex>>,
    /// Whether completions carry the device's timestamps.
    timestamps: bool,
    channel: Option<NonNull<sys::ibv_comp_channel>>,
    capacity: u32,
    _ctx: Arc<ContextInner>,
}

// SAFETY: ibv_poll_cq and friends are thread-safe (provider CQ lock).
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: QPs hold an Arc to this CQ, so none uses it any more; every
        // event taken was acknowledged at once in `wait`.
        unsafe { loaded().map(|l| l.ibv_destroy_cq(self.cq.as_ptr())) };
        if let Some(ch) = self.channel {
            // SAFETY: its only CQ was destroyed just above.
            unsafe { loaded().map(|l| l.ibv_destroy_comp_channel(ch.as_ptr())) };
        }
    }
}

impl CompletionQueue {
    /// Creates a CQ of at least `depth` entries, for polling only.
    pub fn new(ctx: &Context, depth: u32) -> Result<CompletionQueue> {
        Self::with_options(ctx, depth, &CqOptions::default())
    }

    /// Creates a CQ of at least `depth` entries with its own completion
    /// channel, so [`CompletionQueue::wait`] can sleep.
    pub fn with_channel(ctx: &Context, depth: u32) -> Result<CompletionQueue> {
        Self::with_options(ctx, depth, &CqOptions::default().channel(true))
    }

    /// Creates a CQ of at least `depth` entries as `opts` say: with a
    /// channel or not, polled through `ibv_poll_cq` or the extended
    /// interface, with completion timestamps or not. A refusal (a device
    /// without timestamps, or without the extended CQ when it was
    /// demanded) is a typed error and leaves nothing created.
    pub fn with_options(ctx: &Context, depth: u32, opts: &CqOptions) -> Result<CompletionQueue> {
        let with_channel = opts.channel;
        let cqe = i32::try_from(depth)
            .ok()
            .filter(|&d| d > 0)
            .ok_or_else(|| {
                VerbsError::InvalidArgument(format!("CQ depth {depth} must be in 1..=i32::MAX"))
            })?;
        let channel = if with_channel {
            // SAFETY: valid context.
            let ch = unsafe { lib()?.ibv_create_comp_channel(ctx.as_raw()) };
            let ch = NonNull::new(ch).ok_or_else(|| null_error("ibv_create_comp_channel"))?;
            // The fd is made non-blocking so a spurious readiness never
            // blocks ibv_get_cq_event past the caller's deadline.
            // SAFETY: `ch` was just returned non-null by
            // ibv_create_comp_channel and is not destroyed until this
            // function fails or the CQ drops, so it points to a live
            // `ibv_comp_channel` whose `fd` field may be read.
            let fd = unsafe { ch.as_ref().fd };
            // SAFETY: `fd` is the channel's open descriptor (read above);
            // F_GETFL takes no pointer argument and changes nothing.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
            // SAFETY: F_SETFL on the same open descriptor with an integer
            // flag set; it only makes reads on it non-blocking.
            if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0
            {
                let err = null_error("fcntl(O_NONBLOCK) on the completion channel");
                // SAFETY: created above, no CQ attached yet.
                unsafe { lib()?.ibv_destroy_comp_channel(ch.as_ptr()) };
                return Err(err);
            }
            Some(ch)
        } else {
            None
        };
        let raw_channel = channel.map_or(null_mut(), |c| c.as_ptr());
        let ex = match opts.poll_path {
            PollPath::Classic if !opts.timestamps => Ok(None),
            _ => cq_ex::create(ctx, depth, raw_channel, opts),
        };
        let ex = match ex {
            Ok(ex) => ex,
            Err(e) => {
                if let Some(ch) = channel {
                    // SAFETY: no CQ uses it.
                    unsafe { lib()?.ibv_destroy_comp_channel(ch.as_ptr()) };
                }
                return Err(e);
            }
        };
        let cq = match ex {
            // An extended CQ begins with the `ibv_cq` fields
            // (`ibv_cq_ex_to_cq` is this cast).
            Some(ex) => ex.as_ptr().cast::<sys::ibv_cq>(),
            // SAFETY: valid context; the channel (if any) is live.
            None => unsafe { lib()?.ibv_create_cq(ctx.as_raw(), cqe, null_mut(), raw_channel, 0) },
        };
        let Some(cq) = NonNull::new(cq) else {
            let err = null_error("ibv_create_cq");
            if let Some(ch) = channel {
                // SAFETY: no CQ uses it.
                unsafe { lib()?.ibv_destroy_comp_channel(ch.as_ptr()) };
            }
            return Err(err);
        };
        // SAFETY: live CQ; the driver may round the size up.
        let capacity = u32::try_from(unsafe { cq.as_ref().cqe }).unwrap_or(depth);
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                cq,
                ex,
                timestamps: opts.timestamps,
                channel,
                capacity,
                _ctx: ctx.inner.clone(),
            }),
        })
    }

    /// The number of entries the CQ holds (at least the depth asked for).
    pub fn capacity(&self) -> u32 {
        self.inner.capacity
    }

    /// The raw CQ, for `ferrovia-sys` calls.
    pub fn as_raw(&self) -> *mut sys::ibv_cq {
        self.inner.cq.as_ptr()
    }

    /// Polls up to `out.len()` completions into `out` with one
    /// `ibv_poll_cq`; returns how many were written. Never blocks.
    #[inline]
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        // SAFETY: `out` has room for `out.len()` entries.
        unsafe { self.poll_raw(out.as_mut_ptr(), out.len()) }
    }

    /// Polls up to `n` completions into `out` through the CQ's poll path.
    ///
    /// # Safety
    /// `out` must have room for `n` entries.
    #[inline]
    unsafe fn poll_raw(&self, out: *mut WorkCompletion, n: usize) -> Result<usize> {
        // SAFETY: this live CQ and its checked extended view, if any; room
        // for `n` (our caller's contract).
        unsafe { poll_path(self.inner.cq, self.inner.ex, out, n) }
    }

    /// How the CQ is polled: [`PollPath::Extended`] or [`PollPath::Classic`].
    pub fn poll_path(&self) -> PollPath {
        if self.inner.ex.is_some() {
            PollPath::Extended
        } else {
            PollPath::Classic
        }
    }

    /// Whether completions carry the device's timestamps (a CQ created
    /// with [`CqOptions::timestamps`]).
    pub fn has_timestamps(&self) -> bool {
        self.inner.timestamps
    }

    /// Like [`CompletionQueue::poll`], also writing each completion's
    /// device timestamp (raw clock ticks, `completion_timestamp_mask`
    /// bits valid) into `stamps`; polls at most `min(out.len(),
    /// stamps.len())`. A CQ made without timestamps is a typed error.
    pub fn poll_timestamped(
        &self,
        out: &mut [WorkCompletion],
        stamps: &mut [u64],
    ) -> Result<usize> {
        let (Some(ex), true) = (self.inner.ex, self.inner.timestamps) else {
            return Err(VerbsError::InvalidArgument(
                "poll_timestamped needs a CQ created with CqOptions::timestamps".into(),
            ));
        };
        let n = out.len().min(stamps.len());
        // SAFETY: a live extended CQ checked with timestamps at creation;
        // both arrays have room for `n`.
        unsafe { cq_ex::poll(ex, out.as_mut_ptr(), n, Some(stamps.as_mut_ptr())) }.map_err(
            |errno| VerbsError::Verb {
                verb: "ibv_start_poll",
                errno,
            },
        )
    }

    /// Like [`CompletionQueue::poll`], into uninitialised storage: no
    /// zeroing on the hot path. Returns the completions written.
    #[inline]
    pub fn poll_uninit<'a>(
        &self,
        out: &'a mut [MaybeUninit<WorkCompletion>],
    ) -> Result<&'a [WorkCompletion]> {
        // SAFETY: room for `out.len()` entries; both paths write whole
        // entries for the count they return.
        let got = unsafe { self.poll_raw(out.as_mut_ptr().cast(), out.len()) }?;
        // SAFETY: the first `got` entries were initialised by ibv_poll_cq.
        Ok(unsafe { std::slice::from_raw_parts(out.as_ptr().cast::<WorkCompletion>(), got) })
    }

    /// Waits until at least one completion is available, then polls a batch
    /// into `out`. Sleeps on the completion channel; returns
    /// [`VerbsError::Timeout`] when nothing arrives within `timeout`.
    ///
    /// The CQ is armed and then polled again before sleeping, so a
    /// completion that arrives between the first poll and the arming is
    /// never missed.
    pub fn wait(&self, out: &mut [WorkCompletion], timeout: Duration) -> Result<usize> {
        match self.wait_or(out, timeout, &[])? {
            0 => Err(VerbsError::Timeout {
                what: "waiting for a completion",
                after: timeout,
            }),
            n => Ok(n),
        }
    }

    /// Like [`CompletionQueue::wait`], but also wakes when one of `also`
    /// (other non-blocking fds, e.g. a connection manager's event channel)
    /// becomes readable, and reports a timeout as `Ok(0)`: returns the
    /// completions taken, 0 if none arrived before `timeout` passed or an
    /// fd of `also` became readable. Nothing is read from `also`.
    pub fn wait_or(
        &self,
        out: &mut [WorkCompletion],
        timeout: Duration,
        also: &[RawFd],
    ) -> Result<usize> {
        let Some(ch) = self.inner.channel else {
            return Err(VerbsError::InvalidArgument(
                "wait() needs a CQ created with CompletionQueue::with_channel".into(),
            ));
        };
        if out.is_empty() {
            return Err(VerbsError::InvalidArgument(
                "wait() needs room for at least one completion".into(),
            ));
        }
        let start = Instant::now();
        loop {
            let n = self.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            // SAFETY: live CQ with a channel.
            check("ibv_req_notify_cq", unsafe {
                sys::ibv_req_notify_cq(self.as_raw(), 0)
            })?;
            let n = self.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Ok(0);
            }
            // SAFETY: `ch` is live while this CQ is.
            let fd = unsafe { ch.as_ref().fd };
            let mut pfds = [libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            }; MAX_WAIT_FDS];
            let extra = also.len().min(MAX_WAIT_FDS - 1);
            for (p, &fd) in pfds[1..].iter_mut().zip(&also[..extra]) {
                p.fd = fd;
            }
            let left = timeout - elapsed;
            // Round up so we never wake just before the deadline and spin.
            let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
            // SAFETY: `1 + extra` valid pollfds in `pfds`.
            let r = unsafe { libc::poll(pfds.as_mut_ptr(), (1 + extra) as libc::nfds_t, ms) };
            if r < 0 {
                match last_errno() {
                    Some(libc::EINTR) => continue,
                    e => {
                        return Err(VerbsError::Verb {
                            verb: "poll(completion channel)",
                            errno: e.unwrap_or(libc::EIO),
                        });
                    }
                }
            }
            if r == 0 {
                continue; // deadline check at the top of the loop
            }
            if pfds[1..=extra].iter().any(|p| p.revents != 0) {
                return self.poll(out);
            }
            let mut ev_cq = null_mut();
            let mut ev_ctx = null_mut();
            // SAFETY: live channel; the fd is non-blocking so this returns
            // EAGAIN instead of sleeping if another waiter took the event.
            let got = unsafe { lib()?.ibv_get_cq_event(ch.as_ptr(), &mut ev_cq, &mut ev_ctx) };
            if got == 0 {
                // SAFETY: one event was taken for ev_cq (our only CQ).
                unsafe { lib()?.ibv_ack_cq_events(ev_cq, 1) };
            } else if last_errno() != Some(libc::EAGAIN) {
                return Err(null_error("ibv_get_cq_event"));
            }
        }
    }
}

impl CompletionQueue {
    /// The completion channel's file descriptor (non-blocking), for an
    /// event loop to watch: it becomes readable when an event arrives on
    /// a CQ armed with [`CompletionQueue::arm`]. `None` for a CQ made
    /// without a channel. Valid as long as this CQ (or a clone) lives.
    pub fn channel_fd(&self) -> Option<BorrowedFd<'_>> {
        let ch = self.inner.channel?;
        // SAFETY: `ch` is live while this CQ is, and its fd stays open
        // until the channel is destroyed in `CqInner::drop`, which cannot
        // run while `self` is borrowed.
        let fd = unsafe { ch.as_ref().fd };
        // SAFETY: as above: the fd is open for the borrow of `self`.
        Some(unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// Requests one event on the completion channel for the next
    /// completion (`ibv_req_notify_cq`, any completion). A completion
    /// already in the CQ raises no event: poll once after arming before
    /// sleeping on [`CompletionQueue::channel_fd`].
    pub fn arm(&self) -> Result<()> {
        if self.inner.channel.is_none() {
            return Err(VerbsError::InvalidArgument(
                "arm() needs a CQ created with CompletionQueue::with_channel".into(),
            ));
        }
        // SAFETY: live CQ with a channel.
        check("ibv_req_notify_cq", unsafe {
            sys::ibv_req_notify_cq(self.as_raw(), 0)
        })
    }

    /// Takes and acknowledges every event waiting on the completion
    /// channel, without blocking; returns how many there were. An event
    /// loop calls it when the channel's fd was readable, before arming
    /// again.
    pub fn take_events(&self) -> Result<usize> {
        let Some(ch) = self.inner.channel else {
            return Ok(0);
        };
        let mut n = 0;
        loop {
            let mut ev_cq = null_mut();
            let mut ev_ctx = null_mut();
            // SAFETY: live channel; its fd is non-blocking, so this returns
            // EAGAIN instead of sleeping when no event is waiting.
            let got = unsafe { lib()?.ibv_get_cq_event(ch.as_ptr(), &mut ev_cq, &mut ev_ctx) };
            if got != 0 {
                return match last_errno() {
                    Some(libc::EAGAIN) => Ok(n),
                    _ => Err(null_error("ibv_get_cq_event")),
                };
            }
            // SAFETY: one event was taken for ev_cq (the channel's only CQ);
            // acknowledged at once, as `CqInner::drop` expects.
            unsafe { lib()?.ibv_ack_cq_events(ev_cq, 1) };
            n += 1;
        }
    }
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("capacity", &self.inner.capacity)
            .field("channel", &self.inner.channel.is_some())
            .finish()
    }
}

/// Polls up to `n` completions of `cq` into `out`: through `ex`'s
/// start/next/end when given, else `ibv_poll_cq`.
///
/// # Safety
/// `cq` is a live CQ and `ex` its extended view, with the poll functions
/// `cq_ex::create` checked, or `None`; `out` has room for `n` entries.
#[inline]
pub(crate) unsafe fn poll_path(
    cq: NonNull<sys::ibv_cq>,
    ex: Option<NonNull<sys::ibv_cq_ex>>,
    out: *mut WorkCompletion,
    n: usize,
) -> Result<usize> {
    if let Some(ex) = ex {
        // SAFETY: our caller's contract.
        return unsafe { cq_ex::poll(ex, out, n, None) }.map_err(|errno| VerbsError::Verb {
            verb: "ibv_start_poll",
            errno,
        });
    }
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    // SAFETY: WorkCompletion is repr(transparent) over ibv_wc, and `out`
    // has room for `n` of them.
    let got = unsafe { sys::ibv_poll_cq(cq.as_ptr(), n, out.cast()) };
    usize::try_from(got).map_err(|_| VerbsError::Verb {
        verb: "ibv_poll_cq",
        errno: last_errno().unwrap_or(libc::EIO),
    })
}
