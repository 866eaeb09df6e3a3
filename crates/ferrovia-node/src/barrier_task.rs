//! A barrier run step by step outside any scope: what an async runtime
//! polls (`ferrovia-async`). The same state machine as the scoped barrier
//! (`engine`), over a fabric whose signal writes are owned requests
//! holding the sync region's source words, so no scope (whose drain would
//! settle every request of the engine) is opened.

use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use ferrovia_channel::engine::{OwnedOp, OwnedPoll, OwnedTicket, Refused};
use ferrovia_channel::{OwnedBuf, ScopeTarget, TransportError};
use ferrovia_types::WcStatus;

use crate::barrier::{Fabric, Landed, Member, QUERY_WAIT, Run, validate};
use crate::error::BarrierError;
use crate::node::Node;

/// A barrier in progress, started with [`Node::start_barrier`] and driven
/// by [`BarrierTask::poll`] until it is ready; end it early with
/// [`BarrierTask::cancel`] (its signal writes then complete on their own).
///
/// Each poll advances as far as it can without waiting. Peers' signals are
/// RDMA writes into this rank's memory, which raise no event here, so the
/// caller polls again on its own schedule (an async runtime: at once a
/// few times, then on a timer); the barrier's own deadline and query
/// window bound it as in [`NodeScope::barrier`](crate::NodeScope::barrier).
#[derive(Debug)]
pub struct BarrierTask {
    run: Run,
    writes: Vec<(usize, OwnedTicket)>,
    origin: Instant,
    /// The barrier's span, entered on every poll.
    span: tracing::Span,
}

impl Node {
    /// Enters a barrier among `peers` (sorted, containing this rank; see
    /// [`NodeScope::barrier`](crate::NodeScope::barrier) for the rules and
    /// errors). Counts it for every listed pair at once, as the scoped
    /// barrier does.
    pub fn start_barrier(
        &self,
        peers: &[usize],
        timeout: Duration,
    ) -> Result<BarrierTask, BarrierError> {
        let at = validate(peers, self.rank(), self.world_size())?;
        let origin = Instant::now();
        let algorithm = self.algorithm();
        let span = tracing::debug_span!(
            "barrier",
            rank = self.rank(),
            ranks = ?peers,
            algorithm = ?algorithm
        );
        let run = Run::enter(
            &mut self.barrier_state().borrow_mut(),
            Duration::ZERO,
            peers,
            at,
            algorithm,
            timeout,
            QUERY_WAIT,
        );
        Ok(BarrierTask {
            run,
            writes: Vec::new(),
            origin,
            span,
        })
    }
}

impl BarrierTask {
    /// Advances the barrier on `node` (the node that started it) as far as
    /// it can without waiting.
    pub fn poll(&mut self, node: &Node) -> Poll<Result<(), BarrierError>> {
        let _span = self.span.clone().entered();
        let mut fabric = OwnedFabric {
            node,
            writes: &mut self.writes,
            origin: self.origin,
        };
        let result = self
            .run
            .poll(&mut node.barrier_state().borrow_mut(), &mut fabric, true);
        if let Poll::Ready(r) = &result {
            crate::barrier::passed(r, self.origin.elapsed());
            self.settle(node);
        }
        result
    }

    /// Stops polling: the signal writes still outstanding complete on their
    /// own (the engine holds their source until then). The barrier counts
    /// as entered, like one that failed, and if it had not resolved, the
    /// listed peers are told this rank abandoned it, so they fail at once
    /// ([`BarrierError::Abandoned`]) instead of waiting out their timeout.
    pub fn cancel(mut self, node: &Node) {
        let mut fabric = OwnedFabric {
            node,
            writes: &mut self.writes,
            origin: self.origin,
        };
        self.run.cancel(&node.barrier_state().borrow(), &mut fabric);
        self.settle(node);
    }

    fn settle(&mut self, node: &Node) {
        for (_, t) in self.writes.drain(..) {
            node.core().abandon_owned(t);
        }
    }
}

/// The barrier's fabric over owned writes.
struct OwnedFabric<'a> {
    node: &'a Node,
    writes: &'a mut Vec<(usize, OwnedTicket)>,
    origin: Instant,
}

impl OwnedFabric<'_> {
    /// Posts a write of source bytes `src_at..+8` into `to`'s exposed
    /// region at `dst_at`; the engine holds the source until it completes.
    fn write(
        &mut self,
        to: usize,
        src_at: usize,
        dst_at: u64,
    ) -> Result<OwnedTicket, TransportError> {
        let sync = self.node.sync();
        let dst = sync.peer_word(to, dst_at)?;
        let op = OwnedOp::write(
            to,
            OwnedBuf::PeerWritableArc(Arc::clone(&sync.src)),
            src_at..src_at + 8,
            dst,
        );
        let core = self.node.core();
        match core.try_post_owned(op, None) {
            Ok(t) => Ok(t),
            Err(Refused::Failed(e, _)) => Err(e),
            // A full send queue: completions may free room at once; a queue
            // that stays full fails this signal (the barrier then queries).
            Err(Refused::Full(op)) => {
                core.progress()?;
                match core.try_post_owned(op, None) {
                    Ok(t) => Ok(t),
                    Err(Refused::Failed(e, _)) => Err(e),
                    Err(Refused::Full(_)) => Err(TransportError::QueueFull {
                        queue: "send",
                        peer: to,
                        depth: 0,
                        after: Duration::ZERO,
                    }),
                }
            }
        }
    }
}

impl Fabric for OwnedFabric<'_> {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn signal(&mut self, to: usize, slot: usize, word: u64) -> Result<(), TransportError> {
        let node = self.node;
        let (at, offset) = node.sync().stage_signal(node.rank(), to, slot, word)?;
        let t = self.write(to, at, offset)?;
        self.writes.push((to, t));
        Ok(())
    }

    fn signal_slot(&self, from: usize, slot: usize) -> u64 {
        self.node.sync().signal_word(from, slot)
    }

    fn send_query(&mut self, to: usize, id: u64) {
        let node = self.node;
        if let Some((at, offset)) = node.sync().stage_query(node.rank(), id) {
            // Best effort: a rank that cannot be asked does not answer.
            if let Ok(t) = self.write(to, at, offset) {
                node.core().abandon_owned(t);
            }
        }
    }

    fn query_slot(&self, from: usize) -> u64 {
        self.node.sync().query_word(from)
    }

    fn send_answer(&mut self, to: usize, word: u64) {
        let node = self.node;
        if let Some((at, offset)) = node.sync().stage_answer(node.rank(), to, word) {
            // Best effort: a rank that cannot be answered is gone.
            if let Ok(t) = self.write(to, at, offset) {
                node.core().abandon_owned(t);
            }
        }
    }

    fn answer_slot(&self, from: usize) -> u64 {
        self.node.sync().answer_word(from)
    }

    fn abandon(&mut self, to: usize, slot: usize, word: u64, reason: u64) {
        let node = self.node;
        let me = node.rank();
        // Best effort, like a query: the barrier has failed already.
        if let Some((at, offset)) = node.sync().stage_reason(me, to, reason)
            && let Ok(t) = self.write(to, at, offset)
        {
            node.core().abandon_owned(t);
        }
        if let Some((at, offset)) = node.sync().stage_abandon(me, to, slot, word)
            && let Ok(t) = self.write(to, at, offset)
        {
            node.core().abandon_owned(t);
        }
    }

    fn reason_slot(&self, from: usize) -> u64 {
        self.node.sync().reason_word(from)
    }

    fn is_broken(&self, peer: usize) -> bool {
        self.node.core().is_broken(peer)
    }

    fn give_up(&mut self, peer: usize) {
        let _ = self.node.core().flush_peer(peer);
    }

    fn progress(&mut self) -> Result<(), TransportError> {
        self.node.core().progress().map(drop)
    }

    fn landed(&mut self) -> Landed {
        let core = self.node.core();
        while let Some((to, t)) = self.writes.pop() {
            match core.poll_owned(t, Waker::noop()) {
                OwnedPoll::Ready(c, _) if c.status == WcStatus::SUCCESS => {}
                OwnedPoll::Ready(..) | OwnedPoll::Gone => return Landed::Failed(to),
                OwnedPoll::Pending(t) => {
                    self.writes.push((to, t));
                    return Landed::Waiting(to);
                }
            }
        }
        Landed::All
    }
}
