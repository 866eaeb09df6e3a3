//! The engine behind every scope: its state, routing completions, and
//! waiting with deadlines. Posting is in `post`, draining in `drain`.

use std::cell::{Cell, RefCell, RefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrovia_types::WcStatus;

use crate::config::ChannelConfig;
use crate::counters::Counters;
use crate::error::{TransportError, TransportResult};
use crate::op::{CHUNK, Completion, EMPTY_OP, SendOp};
use crate::seam::Transport;
use crate::slots::{ANY_PEER, Landing, Look, Slots, wr_id};

/// Completions routed per progress call.
const BATCH: usize = 32;

/// Busy-polling rounds per read of the clock (a power of two).
const CLOCK_EVERY: u32 = 32;

/// The shared engine of [`Channel`](crate::Channel),
/// [`MultiChannel`](crate::MultiChannel) and anything built on them.
/// Opaque; reached through [`ScopeTarget`](crate::ScopeTarget).
pub struct ChannelCore {
    pub(crate) transport: Arc<dyn Transport>,
    /// Everything posting and routing change, behind one borrow.
    pub(crate) state: RefCell<EngineState>,
    /// Whether a scope over this engine is open (scopes do not nest).
    scope_open: Cell<bool>,
    pub(crate) cfg: ChannelConfig,
    /// The transport's constant properties, per peer, asked once.
    pub(crate) send_depth: Vec<u32>,
    pub(crate) recv_depth: Vec<u32>,
    pub(crate) max_inline: Vec<u32>,
    /// Whether the transport runs remote atomics.
    pub(crate) atomics: bool,
    /// Receives the shared pool holds (0: none).
    pub(crate) shared_depth: u32,
}

/// The engine's mutable state.
pub(crate) struct EngineState {
    pub(crate) slots: Slots,
    /// Per peer: whether its connection is in the error state.
    pub(crate) broken: Vec<bool>,
    /// Whether the shared receive pool was stopped (its receives left
    /// unreachable in the transport): it takes no more.
    pub(crate) shared_broken: bool,
    /// Where polled completions land: kept, so polling zeroes nothing.
    pub(crate) batch: [Completion; BATCH],
    /// Where posting builds the ops of one doorbell: kept, so posting
    /// neither clears nor copies a whole op first.
    pub(crate) ops: [SendOp; CHUNK],
    /// What posting and routing counted (`crate::stats`).
    pub(crate) counters: Counters,
}

/// An open scope over an engine; closes it when dropped (also when the
/// scope unwinds).
pub(crate) struct ScopeGuard<'a>(&'a Cell<bool>);

impl Drop for ScopeGuard<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// What a posted request's handle refers to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket {
    pub(crate) index: u32,
    pub(crate) epoch: u32,
}

impl Ticket {
    pub(crate) fn wr_id(&self) -> u64 {
        wr_id(self.index, self.epoch)
    }
}

impl ChannelCore {
    /// An engine over `transport`: what [`Channel`](crate::Channel) and
    /// [`MultiChannel`](crate::MultiChannel) are built on, and what other
    /// transports (UCX) or test doubles build on.
    pub fn new(transport: Arc<dyn Transport>, cfg: ChannelConfig) -> ChannelCore {
        let peers = transport.peers();
        let send_depth: Vec<u32> = (0..peers).map(|p| transport.send_depth(p)).collect();
        let recv_depth: Vec<u32> = (0..peers).map(|p| transport.recv_depth(p)).collect();
        let max_inline = (0..peers).map(|p| transport.max_inline(p)).collect();
        let atomics = transport.atomics();
        let shared_depth = transport.shared_recv_depth();
        ChannelCore {
            atomics,
            shared_depth,
            state: RefCell::new(EngineState {
                slots: Slots::new(&send_depth, &recv_depth, shared_depth),
                broken: vec![false; peers],
                shared_broken: false,
                batch: [Completion::default(); BATCH],
                ops: [EMPTY_OP; CHUNK],
                counters: Counters::new(peers),
            }),
            scope_open: Cell::new(false),
            send_depth,
            recv_depth,
            max_inline,
            transport,
            cfg,
        }
    }

    /// Number of peers.
    pub fn peers(&self) -> usize {
        self.send_depth.len()
    }

    #[inline]
    pub(crate) fn state(&self) -> RefMut<'_, EngineState> {
        self.state.borrow_mut()
    }

    /// Marks a scope open until the guard drops; `None` if one already is.
    pub(crate) fn open_scope(&self) -> Option<ScopeGuard<'_>> {
        (!self.scope_open.replace(true)).then_some(ScopeGuard(&self.scope_open))
    }

    /// Keeps scopes out of this engine for good: [`run_scope`](crate::engine::run_scope)
    /// fails with [`ScopeError::Nested`](crate::ScopeError::Nested) from
    /// now on. For an owner of owned requests (an async layer) that must
    /// not have them settled by a scope's drain behind its back. False if
    /// a scope is open now (nothing changes then).
    pub fn lock_out_scopes(&self) -> bool {
        if self.scope_open.get() {
            return false;
        }
        self.scope_open.set(true);
        true
    }

    /// Lets scopes open over this engine again, after
    /// [`ChannelCore::lock_out_scopes`]: for an owner of owned requests
    /// that is done with them. False (and nothing changes) while an owned
    /// request is outstanding, whose owner may still be waiting for it.
    pub fn readmit_scopes(&self) -> bool {
        if self.outstanding() > 0 {
            return false;
        }
        self.scope_open.set(false);
        true
    }

    pub(crate) fn check_peer(&self, st: &EngineState, peer: usize) -> TransportResult<()> {
        match st.broken.get(peer) {
            None => Err(TransportError::NoSuchPeer {
                peer,
                count: self.peers(),
            }),
            Some(true) => Err(self.broken(peer)),
            Some(false) => Ok(()),
        }
    }

    /// The error of work with `peer`, whose connection is broken:
    /// [`TransportError::Disconnected`] when the transport knows the peer
    /// went away, else [`TransportError::Broken`].
    pub(crate) fn broken(&self, peer: usize) -> TransportError {
        match self.transport.disconnected(peer) {
            Some(addr) => TransportError::Disconnected {
                peer,
                addr,
                completion: None,
            },
            None => TransportError::Broken { peer },
        }
    }

    /// The error of a request that completed with an error status: it
    /// names the peer, and the peer's address when the transport knows it
    /// disconnected.
    pub(crate) fn failure(&self, c: &Completion) -> TransportError {
        let e = crate::slots::error_of(c);
        if let Some(peer) = e.peer
            && let Some(addr) = self.transport.disconnected(peer)
        {
            return TransportError::Disconnected {
                peer,
                addr,
                completion: Some(e),
            };
        }
        e.into()
    }

    /// Stops all work towards `peer` (its connection goes to the error
    /// state, outstanding requests complete with a flush status); posting
    /// to it fails with [`TransportError::Broken`] until it is reconnected.
    /// For a peer known to be dead, so nothing waits on it.
    pub fn flush_peer(&self, peer: usize) -> TransportResult<()> {
        let count = self.peers();
        if peer >= count {
            return Err(TransportError::NoSuchPeer { peer, count });
        }
        let mut st = self.state();
        st.broken[peer] = true;
        st.counters.flushed(peer);
        drop(st);
        tracing::warn!("flushing the connection to peer {peer}");
        self.transport.flush(peer)
    }

    /// Whether `peer`'s connection is known broken (a request to it failed,
    /// or it was flushed): posting to it fails with
    /// [`TransportError::Broken`]. False for a peer out of range.
    pub fn is_broken(&self, peer: usize) -> bool {
        self.state().broken.get(peer).copied().unwrap_or(false)
    }

    /// Marks a peer broken until it is reconnected.
    pub(crate) fn mark_broken(&self, peer: usize) {
        if let Some(b) = self.state().broken.get_mut(peer) {
            *b = true;
        }
    }

    /// Whether a drain deadline stopped the shared receive pool.
    pub(crate) fn shared_pool_flushed(&self) -> bool {
        self.state().shared_broken
    }

    pub(crate) fn mark_connected(&self, peer: usize) {
        if let Some(b) = self.state().broken.get_mut(peer) {
            *b = false;
        }
    }

    /// Polls the transport once and routes what arrived (waking the
    /// futures of owned requests that completed). Returns how many
    /// arrived.
    pub fn progress(&self) -> TransportResult<usize> {
        let (n, wake) = {
            let mut st = self.state();
            self.poll_route(&mut st)?
        };
        if wake {
            self.wake_routed();
        }
        Ok(n)
    }

    /// Polls the transport once into the batch and routes what arrived,
    /// under the caller's borrow; (how many, whether wakers are due: call
    /// [`ChannelCore::wake_routed`] once the borrow ends).
    fn poll_route(&self, st: &mut EngineState) -> TransportResult<(usize, bool)> {
        let n = self.transport.poll(&mut st.batch)?;
        st.route(n);
        Ok((n, !st.slots.owned.to_wake.is_empty()))
    }

    /// Wakes the futures whose owned requests were routed, once the state
    /// is no longer borrowed (a waker may run code that posts).
    pub(crate) fn wake_routed(&self) {
        let mut due = {
            let mut st = self.state();
            if st.slots.owned.to_wake.is_empty() {
                return;
            }
            std::mem::take(&mut st.slots.owned.to_wake)
        };
        for w in due.drain(..) {
            w.wake();
        }
        // Keep the allocation for the next round.
        let mut st = self.state();
        if st.slots.owned.to_wake.is_empty() {
            st.slots.owned.to_wake = due;
        }
    }

    /// Shared receives posted and not yet reported.
    pub(crate) fn shared_posted(&self) -> usize {
        self.state().slots.outstanding_shared as usize
    }

    pub(crate) fn arm_shared_limit(&self, limit: u32) -> TransportResult<()> {
        if self.shared_depth == 0 {
            return Err(TransportError::NoSharedPool);
        }
        self.transport.arm_shared_limit(limit)
    }

    pub(crate) fn shared_limit_reached(&self) -> TransportResult<bool> {
        if self.shared_depth == 0 {
            return Err(TransportError::NoSharedPool);
        }
        self.transport.shared_limit_reached()
    }

    /// Sleeps until something arrives or `timeout` passes; routes it.
    pub(crate) fn wait_progress(&self, timeout: Duration) -> TransportResult<usize> {
        let (n, wake) = {
            let mut st = self.state();
            let n = self.transport.wait(&mut st.batch, timeout)?;
            st.route(n);
            (n, !st.slots.owned.to_wake.is_empty())
        };
        if wake {
            self.wake_routed();
        }
        Ok(n)
    }

    /// Takes the completion of `t` into `out` if it has arrived (true),
    /// after one poll of the transport.
    #[inline]
    pub(crate) fn try_take(
        &self,
        t: Ticket,
        poll_first: bool,
        out: &mut Landing,
    ) -> TransportResult<bool> {
        // One borrow for the looks, the poll and the routing. A request
        // already done (routed by an earlier poll, or handed back at
        // posting) is taken without polling the transport.
        let (look, wake) = {
            let mut st = self.state();
            match st.slots.take(t.index, t.epoch, out) {
                Look::Pending if poll_first => {
                    let wake = self.poll_route(&mut st)?.1;
                    (st.slots.take(t.index, t.epoch, out), wake)
                }
                look => (look, false),
            }
        };
        if wake {
            self.wake_routed();
        }
        match look {
            Look::Done => Ok(true),
            Look::Pending => Ok(false),
            // Cannot happen through a handle, which is consumed by taking
            // its completion, and whose slot only its scope's drain frees.
            Look::Gone => Err(TransportError::Config(
                "work handle refers to a released request".into(),
            )),
        }
    }

    /// Waits for `t` up to `timeout`, sleeping (`spin == false`) or busy
    /// polling.
    #[inline]
    pub(crate) fn wait_for(
        &self,
        t: Ticket,
        timeout: Duration,
        spin: bool,
        out: &mut Landing,
    ) -> TransportResult<()> {
        // The clock is read only once the first look found nothing.
        if self.try_take(t, true, out)? {
            return Ok(());
        }
        self.wait_longer(t, timeout, spin, out)
    }

    /// [`ChannelCore::wait_for`] once the first look found nothing.
    #[cold]
    #[inline(never)]
    fn wait_longer(
        &self,
        t: Ticket,
        timeout: Duration,
        spin: bool,
        out: &mut Landing,
    ) -> TransportResult<()> {
        let start = Instant::now();
        let peer = self.state().slots.meta[t.index as usize].peer;
        // A receive from the shared pool has no peer until it completes.
        let pooled = peer == ANY_PEER;
        let peer = peer as usize;
        let mut spins = 0u32;
        loop {
            if self.try_take(t, spin, out)? {
                return Ok(());
            }
            if !pooled && self.is_broken(peer) {
                return self.settle_broken(t, peer, out);
            }
            // A busy poll reads the clock only every few rounds: a read
            // costs more than a poll that finds nothing.
            spins = spins.wrapping_add(1);
            if spin && !spins.is_multiple_of(CLOCK_EVERY) {
                std::hint::spin_loop();
                continue;
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                let (wr_id, after) = (t.wr_id(), start.elapsed());
                return Err(if pooled {
                    TransportError::PoolTimeout { wr_id, after }
                } else {
                    TransportError::Timeout { wr_id, peer, after }
                });
            }
            if spin {
                std::hint::spin_loop();
            } else {
                self.wait_progress(left)?;
            }
        }
    }

    /// A wait on work with a peer whose connection is known broken ends at
    /// once: with the request's own completion if it already arrived (all
    /// the transport has is polled first), else with
    /// [`TransportError::Broken`]. The request stays in the scope, whose
    /// drain collects or flushes it.
    fn settle_broken(&self, t: Ticket, peer: usize, out: &mut Landing) -> TransportResult<()> {
        while self.progress()? == BATCH {}
        if self.try_take(t, false, out)? {
            return Ok(());
        }
        Err(self.broken(peer))
    }

    pub(crate) fn detach(&self, t: Ticket) {
        self.state().slots.detach(t.index, t.epoch);
    }
}

impl EngineState {
    /// Routes the first `n` completions of the batch.
    fn route(&mut self, n: usize) {
        let EngineState {
            slots,
            broken,
            batch,
            counters,
            ..
        } = self;
        for c in &batch[..n] {
            counters.completed(c, &slots.meta);
            // A failed request moves its connection to the error state:
            // remember, so the next post reports it instead of failing
            // obscurely.
            if c.status != WcStatus::SUCCESS
                && let Some(p) = slots.peer_of(c)
            {
                broken[p] = true;
            }
            slots.route(c);
        }
        if n > 0 {
            slots.owned.room_freed();
        }
    }

    /// Routes the `n` completions the transport handed back while
    /// posting (into the batch), so their handles' first look finds them
    /// without polling.
    /// Whether wakers are due ([`ChannelCore::wake_routed`]).
    #[inline]
    pub(crate) fn route_posted(&mut self, n: usize) -> bool {
        if n == 0 {
            return false;
        }
        self.route(n);
        !self.slots.owned.to_wake.is_empty()
    }
}
