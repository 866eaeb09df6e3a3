//! Many operations to one peer as one future: posted as lists (one
//! doorbell per 16, selective signalling), awaited together, each with
//! its own result and buffer.

use std::future::Future;
use std::marker::PhantomData;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use ferrovia_channel::engine::{ChannelCore, OwnedOp, OwnedPoll, OwnedTicket, Refused};
use ferrovia_channel::transport::Completion;
use ferrovia_channel::{OwnedBuf, TransportError};

use crate::buffer::OpBuffer;
use crate::engine::{Engine, with};
use crate::op::{OpResult, done_or_failed};

/// Operations posted together (see [`Async::write_list`](crate::Async::write_list)):
/// a future of every one's result, in order, each holding its buffer.
/// Dropping it gives up on those still outstanding, as dropping an
/// [`Op`](crate::Op) does.
#[must_use = "the operations are posted when made; await them for their results and buffers"]
pub struct OpList<B: OpBuffer> {
    engine: Arc<dyn Engine>,
    items: Vec<Item>,
    ranges: Vec<Range<usize>>,
    _buf: PhantomData<fn() -> B>,
}

enum Item {
    Waiting(OwnedOp),
    Posted(OwnedTicket),
    Refused(TransportError, OwnedBuf),
    Completed(Completion, OwnedBuf),
    Taken,
}

impl Item {
    fn from_posted(p: Result<OwnedTicket, Refused>) -> Item {
        match p {
            Ok(t) => Item::Posted(t),
            Err(Refused::Full(op)) => Item::Waiting(op),
            Err(Refused::Failed(e, buf)) => Item::Refused(e, buf),
        }
    }
}

impl<B: OpBuffer> OpList<B> {
    /// Posts `ops` as lists now (those that find the queue full wait for
    /// room at the first poll).
    pub(crate) fn start(
        engine: Arc<dyn Engine>,
        ops: Vec<OwnedOp>,
        ranges: Vec<Range<usize>>,
    ) -> OpList<B> {
        let posted = with(&*engine, |core| core.try_post_owned_list(ops, None));
        OpList {
            engine,
            items: posted.into_iter().map(Item::from_posted).collect(),
            ranges,
            _buf: PhantomData,
        }
    }

    /// How many operations it holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// One pass: posts the waiting, takes what completed. Whether every
    /// operation has a result.
    fn advance(items: &mut [Item], core: &ChannelCore, waker: &Waker) -> bool {
        if items.iter().any(|i| matches!(i, Item::Waiting(_))) {
            let mut at = Vec::new();
            let mut ops = Vec::new();
            for (k, item) in items.iter_mut().enumerate() {
                if matches!(item, Item::Waiting(_))
                    && let Item::Waiting(op) = std::mem::replace(item, Item::Taken)
                {
                    at.push(k);
                    ops.push(op);
                }
            }
            for (k, p) in at
                .into_iter()
                .zip(core.try_post_owned_list(ops, Some(waker)))
            {
                items[k] = Item::from_posted(p);
            }
        }
        // One peer's requests complete in order: the last outstanding one's
        // waker is enough.
        let last = items.iter().rposition(|i| matches!(i, Item::Posted(_)));
        let mut all = true;
        for (k, item) in items.iter_mut().enumerate() {
            let Item::Posted(t) = std::mem::replace(item, Item::Taken) else {
                continue;
            };
            let w = if Some(k) == last {
                waker
            } else {
                Waker::noop()
            };
            *item = match core.poll_owned(t, w) {
                OwnedPoll::Ready(c, buf) => Item::Completed(c, buf),
                OwnedPoll::Pending(t) => {
                    all = false;
                    Item::Posted(t)
                }
                OwnedPoll::Gone => {
                    unreachable!("an async engine's request was collected by a scope")
                }
            };
        }
        all && !items.iter().any(|i| matches!(i, Item::Waiting(_)))
    }
}

impl<B: OpBuffer> Future for OpList<B> {
    type Output = Vec<OpResult<B>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let looks = this.engine.own_looks();
        let items = &mut this.items;
        let ready = with(&*this.engine, |core| {
            for look in 0..looks {
                if look > 0 {
                    let _ = core.progress();
                }
                if Self::advance(items, core, cx.waker()) {
                    return true;
                }
            }
            false
        });
        if !ready {
            return Poll::Pending;
        }
        let out = std::mem::take(&mut this.items)
            .into_iter()
            .zip(std::mem::take(&mut this.ranges))
            .map(|(item, range)| match item {
                Item::Completed(c, buf) => done_or_failed(c, buf, range),
                Item::Refused(e, buf) => done_or_failed_refused(e, buf),
                // `advance` left none of the others.
                _ => unreachable!("an operation of a completed list has no result"),
            })
            .collect();
        Poll::Ready(out)
    }
}

fn done_or_failed_refused<B: OpBuffer>(error: TransportError, buf: OwnedBuf) -> OpResult<B> {
    match B::from_owned(buf) {
        Some(buf) => Err(crate::Failed { error, buf }),
        None => unreachable!("an operation's buffer came back as another kind"),
    }
}

impl<B: OpBuffer> Drop for OpList<B> {
    fn drop(&mut self) {
        for item in self.items.drain(..) {
            if let Item::Posted(t) = item {
                self.engine.abandon(t);
            }
        }
    }
}

impl<B: OpBuffer> std::fmt::Debug for OpList<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pending = self
            .items
            .iter()
            .filter(|i| matches!(i, Item::Posted(_) | Item::Waiting(_)))
            .count();
        f.debug_struct("OpList")
            .field("operations", &self.items.len())
            .field("pending", &pending)
            .finish_non_exhaustive()
    }
}
