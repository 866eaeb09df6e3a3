//! `Async<Node>`: rank, world size and the barrier as a future.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use ferrovia_node::{BarrierError, BarrierTask, Node};
use tokio::time::Sleep;

use crate::engine::Inner;
use crate::handle::Async;

/// How often a barrier past its spin looks at its signals.
const TICK: Duration = Duration::from_millis(1);

impl Async<Node> {
    /// This rank.
    pub fn rank(&self) -> usize {
        self.with(Node::rank)
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.with(Node::world_size)
    }

    /// The transport in words (`verbs on rxe0`, `ucx (UCX_TLS=tcp)`).
    pub fn describe(&self) -> String {
        self.with(|n| n.describe().to_owned())
    }

    /// A barrier among `peers` (sorted, containing this rank), with the
    /// rules and errors of [`NodeScope::barrier`](ferrovia_node::NodeScope::barrier):
    /// it resolves once every listed rank entered this same barrier, or
    /// fails naming the ranks that did not arrive (after `timeout` and a
    /// 0.5 s query window). It is entered (counted) when made; dropping
    /// it before it resolves leaves it failed, as far as the pair counts
    /// go, and tells the listed peers this rank abandoned it (they fail
    /// at once, as when a rank fails a barrier). Peers' signals are RDMA writes into this rank's memory, which
    /// raise no event, so it re-polls at once for
    /// [`AsyncConfig::barrier_spin`](crate::AsyncConfig), then every
    /// millisecond.
    pub fn barrier(&self, peers: &[usize], timeout: Duration) -> Barrier {
        let started = self.with(|n| n.start_barrier(peers, timeout));
        let (task, error) = match started {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(e)),
        };
        Barrier {
            inner: self.inner.clone(),
            task,
            error,
            started: Instant::now(),
            spin: self.inner.cfg.barrier_spin,
            tick: None,
        }
    }
}

/// A barrier in progress: see [`Async::barrier`].
#[must_use = "a barrier is entered when made; await it"]
pub struct Barrier {
    inner: Arc<Inner<Node>>,
    task: Option<BarrierTask>,
    error: Option<BarrierError>,
    started: Instant,
    spin: Duration,
    tick: Option<Pin<Box<Sleep>>>,
}

impl Future for Barrier {
    type Output = Result<(), BarrierError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(e) = this.error.take() {
            return Poll::Ready(Err(e));
        }
        let Some(task) = &mut this.task else {
            panic!("a Barrier polled after it resolved");
        };
        let r = task.poll(&this.inner.target.lock());
        if r.is_ready() {
            this.task = None;
            return r;
        }
        if this.started.elapsed() < this.spin {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let tick = this
            .tick
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(TICK)));
        while tick.as_mut().poll(cx).is_ready() {
            tick.as_mut().reset(tokio::time::Instant::now() + TICK);
        }
        Poll::Pending
    }
}

impl Drop for Barrier {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.cancel(&self.inner.target.lock());
        }
    }
}

impl std::fmt::Debug for Barrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Barrier")
            .field("running", &self.task.is_some())
            .finish_non_exhaustive()
    }
}
