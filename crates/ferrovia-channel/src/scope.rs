//! Scopes: posting work whose buffers the borrow checker protects until
//! the device is done with them.

use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::time::Duration;

use ferrovia_types::WcStatus;

use crate::core::{ChannelCore, Ticket};
use crate::element::Scatter;
use crate::error::{ScopeError, TransportError, TransportResult};
use crate::op::Completion;
use crate::post::Posted;
use crate::request::MAX_ELEMENTS;
use crate::slots::{Landing, RawBuf};

/// Something a [`PollingScope`] can post through: [`Channel`](crate::Channel),
/// [`MultiChannel`](crate::MultiChannel), or a type built on a
/// [`ChannelCore`] over any [`Transport`](crate::transport::Transport).
pub trait ScopeTarget {
    /// The engine posts go through. A scope asks once, when it opens, and
    /// posts to and drains that engine only.
    fn core(&self) -> &ChannelCore;
}

/// A scoped context for posting RDMA work, created by
/// [`Channel::scope`](crate::Channel::scope) and friends.
///
/// Requests posted through it borrow their buffers for `'env`; the handles
/// ([`ScopedPendingWork`]) live only for `'scope`. When the scope ends,
/// everything still outstanding is completed or, past the drain deadline,
/// flushed, so the device never touches a buffer after its borrow ends.
/// As with `std::thread::scope`, the scope owns the bookkeeping, so
/// `mem::forget` on a handle cannot end a borrow early.
pub struct PollingScope<'scope, 'env: 'scope, C: ?Sized> {
    pub(crate) target: &'env C,
    /// The target's engine, asked for once: every post and the drain go to
    /// this one, whatever `ScopeTarget::core` would answer later.
    core: &'env ChannelCore,
    pub(crate) deadline: Duration,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// A handle to one posted request, valid inside its scope.
///
/// Dropping it is fine: the scope still drains the request (and reports it
/// if it failed).
#[must_use = "a pending request is drained at scope end anyway; poll or wait to see its result"]
pub struct ScopedPendingWork<'scope, 'env> {
    core: &'scope ChannelCore,
    ticket: Ticket,
    timeout: Duration,
    done: bool,
    /// A request the transport finished inside its post, successfully:
    /// its slot is free already, and the handle hands back its completion
    /// (rebuilt from the ticket and this) without looking at the engine.
    early: Option<Early>,
    _scope: PhantomData<&'scope mut &'scope ()>,
    /// What a completed receive or read hands back is borrowed for `'env`.
    _env: PhantomData<&'env mut [u8]>,
}

/// What a handle keeps of a request finished inside its post: its peer
/// and its one hand-back buffer, if any (a request with more stays in its
/// slot). Small, so handles stay cheap to move.
#[derive(Clone, Copy)]
struct Early {
    peer: u32,
    buf: Option<RawBuf>,
}

/// A completed request: its completion, and for receives and reads the
/// buffers it borrowed, handed back for their whole borrow: to read, or to
/// post again in the same scope ([`WorkDone::into_scatters`]).
#[derive(Debug)]
pub struct WorkDone<'env> {
    completion: Completion,
    bufs: [Option<Scatter<'env>>; MAX_ELEMENTS],
}

impl<'env> WorkDone<'env> {
    /// The request's wr_id.
    pub fn wr_id(&self) -> u64 {
        self.completion.wr_id
    }

    /// The peer the request went to, or for a receive the peer whose
    /// message arrived (the sender of a receive from the shared pool).
    pub fn peer(&self) -> Option<usize> {
        self.completion.peer.map(|p| p as usize)
    }

    /// Bytes received (receives).
    pub fn byte_len(&self) -> usize {
        self.completion.byte_len as usize
    }

    /// Immediate data delivered with a receive.
    pub fn imm(&self) -> Option<u32> {
        self.completion.imm
    }

    /// An atomic's result: the remote word's value before the operation,
    /// read from the 8-byte result buffer in this host's byte order. (Any
    /// request whose first handed-back buffer is 8 bytes gives its value;
    /// `None` when there is no such buffer.)
    pub fn original_value(&self) -> Option<u64> {
        let b = self.bufs[0].as_ref()?.bytes();
        Some(u64::from_ne_bytes(b.try_into().ok()?))
    }

    /// The first buffer of a receive or read, handed back for reading.
    pub fn into_buffer(self) -> Option<&'env mut [u8]> {
        self.into_buffers().next()
    }

    /// The received bytes: the first buffer cut to what arrived.
    pub fn into_received(self) -> Option<&'env mut [u8]> {
        let n = self.byte_len();
        self.into_buffer().map(|b| {
            let n = n.min(b.len());
            &mut b[..n]
        })
    }

    /// All buffers of a receive or read, in order.
    pub fn into_buffers(self) -> impl Iterator<Item = &'env mut [u8]> {
        self.bufs.into_iter().flatten().map(Scatter::into_bytes)
    }

    /// The buffers as scatter elements again, to post the next receive or
    /// read into them without leaving the scope (a receive ring).
    pub fn into_scatters(self) -> impl Iterator<Item = Scatter<'env>> {
        self.bufs.into_iter().flatten()
    }

    /// The first buffer as a scatter element (see
    /// [`WorkDone::into_scatters`]).
    #[inline]
    pub fn into_scatter(self) -> Option<Scatter<'env>> {
        // Buffers fill the array from the front.
        let [first, ..] = self.bufs;
        first
    }
}

impl<'scope, 'env> ScopedPendingWork<'scope, 'env> {
    pub(crate) fn new(core: &'scope ChannelCore, ticket: Ticket) -> Self {
        ScopedPendingWork {
            core,
            ticket,
            timeout: core.cfg.op_timeout,
            done: false,
            early: None,
            _scope: PhantomData,
            _env: PhantomData,
        }
    }

    /// The wr_id the request was posted with.
    pub fn wr_id(&self) -> u64 {
        self.ticket.wr_id()
    }

    /// Polls the completion queue once; `Ok(Some)` when this request is
    /// complete, `Ok(None)` while it is outstanding.
    pub fn poll(&mut self) -> TransportResult<Option<WorkDone<'env>>> {
        if self.done {
            return Err(TransportError::Config("this work was already taken".into()));
        }
        if let Some(early) = self.early.take() {
            return Ok(Some(self.finish_early(early)));
        }
        let mut landing = Landing::new();
        if !self.core.try_take(self.ticket, true, &mut landing)? {
            return Ok(None);
        }
        self.finish(&landing).map(Some)
    }

    /// Busy-polls until the request completes (lowest latency), up to the
    /// channel's operation timeout.
    pub fn spin_poll(mut self) -> TransportResult<WorkDone<'env>> {
        if let Some(early) = self.early.take() {
            return Ok(self.finish_early(early));
        }
        let mut landing = Landing::new();
        self.core
            .wait_for(self.ticket, self.timeout, true, &mut landing)?;
        self.finish(&landing)
    }

    /// Sleeps on the completion channel until the request completes or
    /// `timeout` passes.
    pub fn wait(mut self, timeout: Duration) -> TransportResult<WorkDone<'env>> {
        if let Some(early) = self.early.take() {
            return Ok(self.finish_early(early));
        }
        let mut landing = Landing::new();
        self.core
            .wait_for(self.ticket, timeout, false, &mut landing)?;
        self.finish(&landing)
    }

    /// The work of a request finished inside its post.
    #[inline]
    fn finish_early(&mut self, early: Early) -> WorkDone<'env> {
        self.done = true;
        let mut bufs: [Option<Scatter<'env>>; MAX_ELEMENTS] = Default::default();
        // SAFETY: as in `finish`: the buffer was a `Scatter<'env>` moved into
        // the request, which completed inside its post (the transport no
        // longer touches it), and the handle's copy was taken out of it
        // (`Option::take`), so it is handed back exactly once.
        bufs[0] = early
            .buf
            .map(|b| unsafe { Scatter::from_raw(b.ptr, b.sge) });
        WorkDone {
            completion: Completion {
                wr_id: self.ticket.wr_id(),
                peer: Some(early.peer),
                ..Completion::default()
            },
            bufs,
        }
    }

    fn finish(&mut self, landing: &Landing) -> TransportResult<WorkDone<'env>> {
        self.done = true;
        let c = landing.completion;
        if c.status != WcStatus::SUCCESS {
            return Err(self.core.failure(&c));
        }
        let mut bufs: [Option<Scatter<'env>>; MAX_ELEMENTS] = Default::default();
        for (out, b) in bufs.iter_mut().zip(&landing.bufs[..landing.nbufs]) {
            // SAFETY: `b` was a `Scatter<'env>` (an `&'env mut [u8]` and its
            // key) moved into the request; the request has completed, so the
            // device no longer writes it, and its slot was released (or, for
            // a request finished inside its post, the handle's own copy
            // taken out of it), so it is handed back exactly once.
            *out = Some(unsafe { Scatter::from_raw(b.ptr, b.sge) });
        }
        Ok(WorkDone {
            completion: c,
            bufs,
        })
    }
}

impl Drop for ScopedPendingWork<'_, '_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if self.early.is_some() {
            // Finished and released already: only counted, as a dropped
            // handle of a completed request is (a manual scope reports it).
            self.core.state().slots.dropped_unpolled += 1;
        } else {
            self.core.detach(self.ticket);
        }
    }
}

impl<'scope, 'env, C: ScopeTarget + ?Sized> PollingScope<'scope, 'env, C> {
    /// What the scope posts through (a `Channel`, `MultiChannel`, `Node`),
    /// borrowed for the whole scope: its registered buffers can be posted.
    pub fn target(&self) -> &'env C {
        self.target
    }

    /// Sets how long the end of this scope waits for outstanding work
    /// before flushing it.
    pub fn set_drain_deadline(&mut self, deadline: Duration) {
        self.deadline = deadline;
    }

    pub(crate) fn core(&self) -> &'scope ChannelCore {
        self.core
    }

    pub(crate) fn handle(&self, t: Ticket) -> ScopedPendingWork<'scope, 'env> {
        ScopedPendingWork::new(self.core(), t)
    }

    /// The handle of a posted request; `bufs` are what it hands back (a
    /// read's or an atomic's buffers), kept by the handle itself when the
    /// request finished inside its post.
    #[inline]
    pub(crate) fn posted(&self, p: Posted, bufs: &[RawBuf]) -> ScopedPendingWork<'scope, 'env> {
        match p {
            Posted::Pending(t) => self.handle(t),
            Posted::Done(t, peer) => {
                let mut h = self.handle(t);
                h.early = Some(Early {
                    peer,
                    buf: bufs.first().copied(),
                });
                h
            }
        }
    }

    /// Polls the completion queue once, routing what arrived to its
    /// handles; returns how many completions arrived.
    pub fn progress(&mut self) -> TransportResult<usize> {
        self.core().progress()
    }
}

/// What the end of a scope does with requests its closure left unpolled
/// (posted, handle dropped or never waited on). Either way they are
/// drained: the device is done with them before the scope returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unpolled {
    /// Drain them quietly ([`Channel::scope`](crate::Channel::scope)).
    Drain,
    /// Drain them and count them in the drain error's `unpolled`
    /// ([`Channel::manual_scope`](crate::Channel::manual_scope)).
    Report,
}

/// Runs `f` in a scope over `target`, then drains. Used by every scope
/// entry point. Fails with [`ScopeError::Nested`] (without running `f`)
/// if a scope over the same engine is already open: a scope's drain
/// settles every request of its engine, which would end an enclosing
/// scope's requests behind its handles' backs.
pub fn run_scope<'env, C, F, T, E>(
    target: &'env C,
    unpolled: Unpolled,
    f: F,
) -> Result<T, ScopeError<E>>
where
    C: ScopeTarget + ?Sized,
    F: for<'scope> FnOnce(&mut PollingScope<'scope, 'env, C>) -> Result<T, E>,
{
    let core = target.core();
    let Some(_open) = core.open_scope() else {
        return Err(ScopeError::Nested);
    };
    let mut scope = PollingScope {
        target,
        core,
        deadline: core.cfg.drain_deadline,
        _scope: PhantomData,
        _env: PhantomData,
    };
    // A panic in the closure must not skip the drain: unwind only after
    // the device is done with every borrowed buffer.
    let outcome = catch_unwind(AssertUnwindSafe(|| f(&mut scope)));
    let drained = core.drain(scope.deadline, unpolled == Unpolled::Report);
    let result = match outcome {
        Ok(r) => r,
        Err(panic) => resume_unwind(panic),
    };
    match (result, drained) {
        (Ok(v), Ok(())) => Ok(v),
        (Err(e), Ok(())) => Err(ScopeError::Closure(e)),
        (Ok(_), Err(d)) => Err(ScopeError::Drain(d)),
        (Err(e), Err(d)) => Err(ScopeError::Both {
            closure: e,
            drain: d,
        }),
    }
}
