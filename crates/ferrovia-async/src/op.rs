//! One operation as a future that owns its buffer.

use std::future::Future;
use std::marker::PhantomData;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ferrovia_channel::engine::{OwnedOp, OwnedPoll, OwnedTicket, Refused};
use ferrovia_channel::transport::Completion;
use ferrovia_channel::{OwnedBuf, TransportError};
use ferrovia_mr::RegisteredBuffer;
use ferrovia_types::{CompletionError, WcStatus};

use crate::buffer::OpBuffer;
use crate::engine::{Engine, with};
use crate::error::Failed;

/// How often a busy-polling operation polls the transport per poll of
/// its future before it lets other tasks run.
pub(crate) const BUSY_LOOKS: usize = 64;
/// The same with the default wake-up ([`Wake::Kernel`](crate::Wake) with a
/// spin): enough to catch a same-host peer's answer (a few hundred ns)
/// without holding the runtime's thread much longer than one look.
pub(crate) const KERNEL_LOOKS: usize = 8;

/// What an [`Op`] resolves to.
pub type OpResult<B> = Result<Done<B>, Failed<B>>;

/// An operation in flight: a future of its [`Done`] (or [`Failed`]),
/// both of which hand its buffer back.
///
/// The operation is posted when it is made (when the peer's queue has
/// room; otherwise at its first poll, once a completion frees room), so a
/// receive is waiting for its message before the future is awaited.
///
/// **Dropping it** (or a `tokio::time::timeout` around it expiring) never
/// frees memory the device or UCX may still touch: the engine keeps the
/// buffer until the completion arrives, then moves it to the returned list
/// ([`Async::take_returned`](crate::Async::take_returned)). A receive given
/// up on still takes the peer's next message (verbs cannot take back a
/// posted receive); it lands in that returned buffer. A request still
/// outstanding past the abandoned deadline
/// ([`AsyncConfig::abandoned_deadline`](crate::AsyncConfig)) has its
/// peer's connection flushed, as a scope's drain would. **Forgetting it**
/// (`mem::forget`) leaks its slot and buffer until the engine is dropped,
/// which settles them; it never frees them early. A future holds the
/// engine: dropping the last one after the last [`Async`](crate::Async)
/// handle drops the engine, which may block (see `Async`'s docs).
#[must_use = "an operation is posted when made; await it for its result and buffer (dropping it leaves the buffer in the returned list)"]
pub struct Op<B: OpBuffer> {
    engine: Arc<dyn Engine>,
    state: State,
    range: Range<usize>,
    _buf: PhantomData<fn() -> B>,
}

enum State {
    /// Not posted yet: the queue was full.
    Waiting(OwnedOp),
    Posted(OwnedTicket),
    /// Refused before posting; reported at the first poll.
    Refused(TransportError, OwnedBuf),
    Finished,
}

/// A completed operation and its buffer.
#[derive(Debug)]
pub struct Done<B> {
    /// The operation's buffer, handed back: the device and UCX are done
    /// with it.
    pub buf: B,
    completion: Completion,
    range: Range<usize>,
}

impl<B> Done<B> {
    /// The peer the operation went to, or whose message a receive took.
    pub fn peer(&self) -> Option<usize> {
        self.completion.peer.map(|p| p as usize)
    }

    /// Bytes received (receives).
    pub fn byte_len(&self) -> usize {
        self.completion.byte_len as usize
    }

    /// Immediate data that came with a receive.
    pub fn imm(&self) -> Option<u32> {
        self.completion.imm
    }

    /// The request's wr_id.
    pub fn wr_id(&self) -> u64 {
        self.completion.wr_id
    }

    /// The range of the buffer the operation used.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }

    /// The buffer, dropping the rest.
    pub fn into_buf(self) -> B {
        self.buf
    }
}

impl Done<RegisteredBuffer> {
    /// What a receive took: its range cut to the bytes that arrived.
    pub fn received(&self) -> &[u8] {
        let n = self.byte_len().min(self.range.len());
        &self.buf[self.range.start..self.range.start + n]
    }

    /// What a read brought: its whole range.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.range.clone()]
    }

    /// An atomic's result: the remote word's value before the operation
    /// (the 8 bytes of the range, in this host's byte order).
    pub fn original_value(&self) -> Option<u64> {
        Some(u64::from_ne_bytes(self.bytes().try_into().ok()?))
    }
}

impl<B: OpBuffer> Op<B> {
    /// Posts `op` now if its queue has room.
    pub(crate) fn start(engine: Arc<dyn Engine>, op: OwnedOp, range: Range<usize>) -> Op<B> {
        let posted = with(&*engine, |core| core.try_post_owned(op, None));
        Self::from_posted(engine, posted, range)
    }

    /// An operation from its post's outcome.
    pub(crate) fn from_posted(
        engine: Arc<dyn Engine>,
        posted: Result<OwnedTicket, Refused>,
        range: Range<usize>,
    ) -> Op<B> {
        let state = match posted {
            Ok(t) => State::Posted(t),
            Err(Refused::Full(op)) => State::Waiting(op),
            Err(Refused::Failed(e, buf)) => State::Refused(e, buf),
        };
        Op {
            engine,
            state,
            range,
            _buf: PhantomData,
        }
    }

    /// The wr_id, once posted.
    pub fn wr_id(&self) -> Option<u64> {
        match &self.state {
            State::Posted(t) => Some(t.wr_id()),
            _ => None,
        }
    }

    fn buffer(buf: OwnedBuf) -> B {
        match B::from_owned(buf) {
            Some(b) => b,
            // The engine hands back exactly the buffer it was given.
            None => unreachable!("an operation's buffer came back as another kind"),
        }
    }

    fn failed(&self, error: TransportError, buf: OwnedBuf) -> Poll<OpResult<B>> {
        Poll::Ready(Err(Failed {
            error,
            buf: Self::buffer(buf),
        }))
    }
}

impl<B: OpBuffer> Future for Op<B> {
    type Output = OpResult<B>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<OpResult<B>> {
        let this = self.get_mut();
        let looks = this.engine.own_looks();
        let state = std::mem::replace(&mut this.state, State::Finished);
        let (next, out) = with(&*this.engine, |core| {
            let ticket = match state {
                State::Waiting(op) => match core.try_post_owned(op, Some(cx.waker())) {
                    Ok(t) => t,
                    Err(Refused::Full(op)) => return (State::Waiting(op), None),
                    Err(Refused::Failed(e, buf)) => return (State::Finished, Some(Err((e, buf)))),
                },
                State::Posted(t) => t,
                State::Refused(e, buf) => return (State::Finished, Some(Err((e, buf)))),
                State::Finished => return (State::Finished, None),
            };
            // Busy polling: poll the transport a few times before letting
            // other tasks (the reactor among them) run; not before the
            // first look, which finds what was routed already.
            let mut ticket = ticket;
            for look in 0..looks {
                if look > 0 {
                    let _ = core.progress();
                }
                ticket = match core.poll_owned(ticket, cx.waker()) {
                    OwnedPoll::Ready(c, buf) => return (State::Finished, Some(Ok((c, buf)))),
                    OwnedPoll::Pending(t) => t,
                    // Scopes are locked out of an async engine, so no drain
                    // collects its requests.
                    OwnedPoll::Gone => {
                        unreachable!("an async engine's request was collected by a scope")
                    }
                };
            }
            (State::Posted(ticket), None)
        });
        this.state = next;
        match out {
            None if matches!(this.state, State::Finished) => {
                panic!("an Op polled after it completed")
            }
            None => Poll::Pending,
            Some(Err((e, buf))) => this.failed(e, buf),
            Some(Ok((c, buf))) => Poll::Ready(done_or_failed(c, buf, this.range.clone())),
        }
    }
}

/// A completed request's result: `Done` on success, else `Failed` with
/// the completion's error (naming the peer); the buffer either way.
pub(crate) fn done_or_failed<B: OpBuffer>(
    c: Completion,
    buf: OwnedBuf,
    range: Range<usize>,
) -> OpResult<B> {
    let Some(buf) = B::from_owned(buf) else {
        unreachable!("an operation's buffer came back as another kind")
    };
    if c.status != WcStatus::SUCCESS {
        let mut error = CompletionError::new(c.wr_id, c.status, c.vendor_err);
        if let Some(p) = c.peer {
            error = error.with_peer(p as usize);
        }
        return Err(Failed {
            error: error.into(),
            buf,
        });
    }
    Ok(Done {
        buf,
        completion: c,
        range,
    })
}

impl<B: OpBuffer> Drop for Op<B> {
    fn drop(&mut self) {
        if let State::Posted(t) = std::mem::replace(&mut self.state, State::Finished) {
            self.engine.abandon(t);
        }
    }
}

impl<B: OpBuffer> std::fmt::Debug for Op<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Waiting(_) => "waiting for queue room",
            State::Posted(_) => "posted",
            State::Refused(..) => "refused",
            State::Finished => "finished",
        };
        f.debug_struct("Op")
            .field("state", &state)
            .field("range", &self.range)
            .finish_non_exhaustive()
    }
}
