//! Bookkeeping of outstanding work: one slot per posted request, found by
//! `wr_id`, preallocated so posting and routing never allocate.
//!
//! What posting and routing touch is kept dense ([`Meta`], 16 bytes a
//! slot); a completion and a receive's hand-back buffers live in arrays of
//! their own, read only when a handle takes them.

use std::ptr::NonNull;

use ferrovia_types::{CompletionError, Sge, WcStatus};

use crate::op::Completion;
use crate::owned_slots::OwnedSlots;
use crate::pieces::PieceError;
use crate::request::MAX_ELEMENTS;
use crate::ring::SendRing;

/// A borrowed buffer a receive or read will hand back: raw because the
/// borrow (`&'env mut [u8]`) was moved into the request.
#[derive(Clone, Copy)]
pub(crate) struct RawBuf {
    pub(crate) ptr: NonNull<u8>,
    /// Its element (address, length, key), to hand it back as a scatter.
    pub(crate) sge: Sge,
}

impl Default for RawBuf {
    fn default() -> Self {
        RawBuf {
            ptr: NonNull::dangling(),
            sge: Sge::default(),
        }
    }
}

// SAFETY: a RawBuf stands for an `&'env mut [u8]` moved into a request,
// which may be sent to another thread like the reference itself.
unsafe impl Send for RawBuf {}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Queue {
    Send,
    Recv,
    /// The shared receive pool: any peer's message.
    Shared,
}

/// The peer of a shared receive before its completion names the sender.
pub(crate) const ANY_PEER: u32 = u32::MAX;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum State {
    Free,
    Pending,
    Done,
}

/// The hot part of a slot.
#[derive(Clone, Copy)]
pub(crate) struct Meta {
    pub(crate) epoch: u32,
    pub(crate) peer: u32,
    pub(crate) state: State,
    pub(crate) queue: Queue,
    /// Its handle was dropped (or never handed out): free it as soon as it
    /// completes.
    pub(crate) detached: bool,
    pub(crate) nbufs: u8,
    /// The engine holds the request's buffer (`crate::owned`).
    pub(crate) owned: bool,
    /// A piece (`crate::pieces`): its error goes to the piece errors,
    /// with its tag, rather than to the unobserved ones.
    pub(crate) piece: bool,
}

/// Where a handle's completion lands when it is taken: the completion,
/// and the hand-back buffers of a receive or read (the first `nbufs`).
/// It lives in the waiting handle's frame and is written once, by
/// [`Slots::take`], rather than returned through every layer; a request
/// finished inside its post keeps one in its handle.
pub(crate) struct Landing {
    pub(crate) completion: Completion,
    pub(crate) nbufs: usize,
    pub(crate) bufs: [RawBuf; MAX_ELEMENTS],
}

impl Landing {
    pub(crate) fn new() -> Landing {
        Landing {
            completion: Completion::default(),
            nbufs: 0,
            bufs: [RawBuf::default(); MAX_ELEMENTS],
        }
    }
}

/// What a handle finds in its slot.
pub(crate) enum Look {
    /// Completed: taken into the landing, and the slot released.
    Done,
    Pending,
    /// Released already (cannot happen through a live handle).
    Gone,
}

pub(crate) struct Slots {
    pub(crate) meta: Vec<Meta>,
    done: Vec<Completion>,
    bufs: Vec<[RawBuf; MAX_ELEMENTS]>,
    free: Vec<u32>,
    /// Per peer: send slots in posting order (completions arrive in it).
    send_rings: Vec<SendRing>,
    pub(crate) outstanding_send: Vec<u32>,
    pub(crate) outstanding_recv: Vec<u32>,
    /// Receives posted to the shared pool and not yet completed.
    pub(crate) outstanding_shared: u32,
    /// Errors of requests nobody will observe (detached handles).
    pub(crate) unobserved: Vec<CompletionError>,
    /// Handles dropped before their completion was taken (a manual scope
    /// reports them).
    pub(crate) dropped_unpolled: usize,
    /// Buffers and wakers of owned requests (`crate::owned`).
    pub(crate) owned: OwnedSlots,
    /// Per slot: the tag of the piece in it and its run's id
    /// (`crate::pieces`); allocated on the first post of pieces.
    pub(crate) tags: Vec<(u32, u64)>,
    /// The id of the last run of pieces posted (ids start at 1).
    pub(crate) last_run: u64,
    /// Errors of pieces before the last of their run, oldest first, at
    /// most [`PIECE_ERRORS_KEPT`].
    pub(crate) piece_errors: Vec<PieceError>,
    /// Piece errors dropped past that bound.
    pub(crate) piece_errors_dropped: u64,
}

/// Piece errors kept until taken.
pub(crate) const PIECE_ERRORS_KEPT: usize = 1024;

pub(crate) fn wr_id(index: u32, epoch: u32) -> u64 {
    (u64::from(epoch) << 32) | u64::from(index)
}

fn split(wr_id: u64) -> (u32, u32) {
    (wr_id as u32, (wr_id >> 32) as u32)
}

impl Slots {
    pub(crate) fn new(send_depths: &[u32], recv_depths: &[u32], shared_depth: u32) -> Slots {
        let outstanding: u64 = send_depths
            .iter()
            .chain(recv_depths)
            .map(|&d| u64::from(d))
            .sum::<u64>()
            + u64::from(shared_depth);
        // Twice the queue depths: room for completed handles the program
        // still holds while the queues are full again.
        let cap = (2 * outstanding).clamp(1, u64::from(u32::MAX)) as u32;
        let free_meta = Meta {
            epoch: 0,
            peer: 0,
            state: State::Free,
            queue: Queue::Send,
            detached: false,
            nbufs: 0,
            owned: false,
            piece: false,
        };
        Slots {
            meta: vec![free_meta; cap as usize],
            done: vec![Completion::default(); cap as usize],
            bufs: vec![[RawBuf::default(); MAX_ELEMENTS]; cap as usize],
            free: (0..cap).rev().collect(),
            send_rings: send_depths.iter().map(|&d| SendRing::new(d)).collect(),
            outstanding_send: vec![0; send_depths.len()],
            outstanding_recv: vec![0; recv_depths.len()],
            outstanding_shared: 0,
            unobserved: Vec::with_capacity(16),
            dropped_unpolled: 0,
            owned: OwnedSlots::default(),
            tags: Vec::new(),
            last_run: 0,
            piece_errors: Vec::new(),
            piece_errors_dropped: 0,
        }
    }

    pub(crate) fn free_count(&self) -> usize {
        self.free.len()
    }

    pub(crate) fn pending(&self) -> usize {
        self.outstanding_send
            .iter()
            .chain(&self.outstanding_recv)
            .map(|&n| n as usize)
            .sum::<usize>()
            + self.outstanding_shared as usize
    }

    /// Takes a slot for a request about to be posted; returns (index,
    /// epoch). `bufs` are what a receive or read hands back; a `detached`
    /// request has no handle and frees its slot when it completes. The
    /// caller made sure a slot is free (`free_count`).
    #[inline(always)]
    pub(crate) fn alloc(
        &mut self,
        peer: usize,
        queue: Queue,
        bufs: &[RawBuf],
        detached: bool,
    ) -> (u32, u32) {
        let index = self
            .free
            .pop()
            .expect("posting reserves a free slot before taking it");
        let m = &mut self.meta[index as usize];
        m.epoch = m.epoch.wrapping_add(1);
        m.state = State::Pending;
        m.peer = if queue == Queue::Shared {
            ANY_PEER
        } else {
            peer as u32
        };
        m.queue = queue;
        m.detached = detached;
        m.nbufs = bufs.len() as u8;
        m.owned = false;
        m.piece = false;
        let epoch = m.epoch;
        // One element (an atomic's result, most reads) without a memcpy call.
        match bufs {
            [] => {}
            [one] => self.bufs[index as usize][0] = *one,
            many => self.bufs[index as usize][..many.len()].copy_from_slice(many),
        }
        match queue {
            Queue::Send => {
                self.send_rings[peer].push_back(index);
                self.outstanding_send[peer] += 1;
            }
            Queue::Recv => self.outstanding_recv[peer] += 1,
            Queue::Shared => self.outstanding_shared += 1,
        }
        (index, epoch)
    }

    /// Takes a completed owned request's completion and buffer and frees
    /// its slot; `None` if it has not completed (or is not there).
    pub(crate) fn take_owned(
        &mut self,
        index: u32,
        epoch: u32,
    ) -> Option<(Completion, Option<crate::owned_buf::OwnedBuf>)> {
        if self.state(index, epoch) != Some(State::Done) {
            return None;
        }
        let buf = self.owned.take(index);
        self.meta[index as usize].owned = false;
        let c = self.done[index as usize];
        self.release(index);
        Some((c, buf))
    }

    /// Gives up on an owned request: freed with its buffer handed on when
    /// it completes (at once if it has). Whether it was still pending.
    pub(crate) fn abandon_owned(&mut self, index: u32, epoch: u32) -> bool {
        match self.state(index, epoch) {
            Some(State::Pending) => {
                self.meta[index as usize].detached = true;
                self.owned.take_waker(index);
                true
            }
            Some(State::Done) => {
                self.release(index);
                false
            }
            Some(State::Free) | None => false,
        }
    }

    /// The peer of the request in slot `index`.
    pub(crate) fn peer_at(&self, index: u32) -> usize {
        self.meta[index as usize].peer as usize
    }

    /// Undoes `alloc` for a request the transport refused to post.
    pub(crate) fn unpost(&mut self, index: u32) {
        let m = self.meta[index as usize];
        let peer = m.peer as usize;
        match m.queue {
            Queue::Send => {
                self.send_rings[peer].remove_newest(index);
                self.outstanding_send[peer] -= 1;
            }
            Queue::Recv => self.outstanding_recv[peer] -= 1,
            Queue::Shared => self.outstanding_shared -= 1,
        }
        self.release(index);
    }

    #[inline]
    pub(crate) fn release(&mut self, index: u32) {
        let m = &mut self.meta[index as usize];
        if m.owned {
            // Whoever still holds it (a completion nobody took, a request
            // given up on): the engine hands its buffer on, never frees it
            // under the device.
            m.owned = false;
            self.release_owned(index);
        }
        let m = &mut self.meta[index as usize];
        m.state = State::Free;
        m.nbufs = 0;
        self.free.push(index);
    }

    #[inline(never)]
    fn release_owned(&mut self, index: u32) {
        self.owned.release(index, self.done[index as usize]);
    }

    /// Records a completion. A send completion also completes the
    /// unsignalled sends posted before it to the same peer.
    #[inline]
    pub(crate) fn route(&mut self, c: &Completion) {
        let (index, epoch) = split(c.wr_id);
        let Some(m) = self.meta.get(index as usize) else {
            return;
        };
        if m.epoch != epoch || m.state != State::Pending {
            return; // not ours (stale or foreign wr_id): nothing to update
        }
        let peer = m.peer as usize;
        match m.queue {
            Queue::Recv => self.outstanding_recv[peer] -= 1,
            Queue::Shared => self.outstanding_shared -= 1,
            Queue::Send => {
                let mut retired = 0;
                while let Some(earlier) = self.send_rings[peer].pop_front() {
                    retired += 1;
                    if earlier == index {
                        break;
                    }
                    self.finish_unsignalled(earlier);
                }
                self.outstanding_send[peer] -= retired;
            }
        }
        self.finish(index, c);
    }

    /// Settles the send just posted in slot `index` when the transport
    /// finished it inside the call (`c`, a plain success: no length, no
    /// immediate) and it is its peer's only outstanding send, a fresh scope
    /// request (no handle dropped, not owned, not a piece): its slot is
    /// released at once (true), and its handle rebuilds the completion
    /// from its wr_id and peer. False (nothing changed) otherwise: then
    /// `route` it.
    #[inline]
    pub(crate) fn settle_sole(&mut self, index: u32, c: &Completion) -> bool {
        let m = self.meta[index as usize];
        let peer = m.peer as usize;
        if c.status != WcStatus::SUCCESS
            || c.wr_id != wr_id(index, m.epoch)
            || m.queue != Queue::Send
            || m.detached
            || m.owned
            || m.piece
            || self.outstanding_send[peer] != 1
            || c.byte_len != 0
            || c.imm.is_some()
        {
            return false;
        }
        self.send_rings[peer].pop_front();
        self.outstanding_send[peer] = 0;
        let m = &mut self.meta[index as usize];
        m.state = State::Free;
        m.nbufs = 0;
        self.free.push(index);
        true
    }

    /// Sets the hand-back buffers of slot `index` (allocated without them).
    #[inline]
    pub(crate) fn set_bufs(&mut self, index: u32, bufs: &[RawBuf]) {
        match bufs {
            [] => {}
            [one] => self.bufs[index as usize][0] = *one,
            many => self.bufs[index as usize][..many.len()].copy_from_slice(many),
        }
        self.meta[index as usize].nbufs = bufs.len() as u8;
    }

    /// An unsignalled send completed by a later signalled one: a success.
    /// Most are list requests without a handle, freed at once (nobody
    /// reads their completion).
    #[inline]
    fn finish_unsignalled(&mut self, index: u32) {
        let m = &self.meta[index as usize];
        if m.detached && !m.owned {
            self.release(index);
        } else {
            self.finish_success(index);
        }
    }

    /// Records a success for the request in slot `index`.
    #[inline(never)]
    fn finish_success(&mut self, index: u32) {
        let done = Completion {
            wr_id: wr_id(index, self.meta[index as usize].epoch),
            ..Completion::default()
        };
        self.finish(index, &done);
    }

    #[inline]
    fn finish(&mut self, index: u32, c: &Completion) {
        let m = &mut self.meta[index as usize];
        // The sender: the transport's word for a shared receive, the
        // request's own peer otherwise.
        let mut c = *c;
        if c.peer.is_none() && m.peer != ANY_PEER {
            c.peer = Some(m.peer);
        }
        if m.detached {
            // An owned request given up on hands its buffer on with this
            // completion (`release`); nobody else will see its error. A
            // piece's error goes with its tag to whoever posted it.
            if c.status != WcStatus::SUCCESS {
                if m.piece {
                    let (tag, run) = self
                        .tags
                        .get(index as usize)
                        .copied()
                        .unwrap_or((u32::MAX, 0));
                    self.piece_error(tag, run, error_of(&c));
                } else if !m.owned {
                    self.unobserved.push(error_of(&c));
                }
            }
            self.done[index as usize] = c;
            self.release(index);
        } else {
            m.state = State::Done;
            self.done[index as usize] = c;
            if m.owned {
                self.owned.completed(index);
            }
        }
    }

    /// Records a piece's error, within the bound.
    #[cold]
    fn piece_error(&mut self, tag: u32, run: u64, error: CompletionError) {
        if self.piece_errors.len() < PIECE_ERRORS_KEPT {
            self.piece_errors.push(PieceError { tag, run, error });
        } else {
            self.piece_errors_dropped += 1;
        }
    }

    /// The completion of the slot at `index` if it is done (for a piece's
    /// ticket), releasing it.
    pub(crate) fn take_done(&mut self, index: u32, epoch: u32) -> Option<Option<Completion>> {
        match self.state(index, epoch)? {
            State::Done => {
                let c = self.done[index as usize];
                self.release(index);
                Some(Some(c))
            }
            State::Pending => Some(None),
            State::Free => None,
        }
    }

    /// The state of the slot a handle refers to, if it still does.
    #[inline]
    pub(crate) fn state(&self, index: u32, epoch: u32) -> Option<State> {
        let m = &self.meta[index as usize];
        (m.epoch == epoch && m.state != State::Free).then_some(m.state)
    }

    /// Takes a handle's completion if it arrived, with its hand-back
    /// buffers (receives and reads only), into `out`, and releases the
    /// slot.
    #[inline]
    pub(crate) fn take(&mut self, index: u32, epoch: u32, out: &mut Landing) -> Look {
        match self.state(index, epoch) {
            Some(State::Done) => {
                let nbufs = self.meta[index as usize].nbufs as usize;
                if nbufs > 0 {
                    // The whole (small, fixed) array: no memcpy call.
                    out.bufs = self.bufs[index as usize];
                }
                out.nbufs = nbufs;
                out.completion = self.done[index as usize];
                self.release(index);
                Look::Done
            }
            Some(State::Pending) => Look::Pending,
            Some(State::Free) | None => Look::Gone,
        }
    }

    /// Frees the slot when it completes, as a dropped handle's, but without
    /// counting it as unpolled (a piece's ticket given up on purpose).
    pub(crate) fn detach_quietly(&mut self, index: u32, epoch: u32) {
        if self.state(index, epoch) == Some(State::Pending) {
            self.meta[index as usize].detached = true;
        }
    }

    /// Called when a handle is dropped unobserved.
    pub(crate) fn detach(&mut self, index: u32, epoch: u32) {
        match self.state(index, epoch) {
            Some(State::Pending) => {
                self.dropped_unpolled += 1;
                self.meta[index as usize].detached = true;
            }
            Some(State::Done) => {
                self.dropped_unpolled += 1;
                let c = self.done[index as usize];
                if c.status != WcStatus::SUCCESS {
                    self.unobserved.push(error_of(&c));
                }
                self.release(index);
            }
            Some(State::Free) | None => {}
        }
    }

    /// wr_ids of everything still pending, with their peers.
    pub(crate) fn pending_ids(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.meta
            .iter()
            .enumerate()
            .filter(|(_, m)| m.state == State::Pending && m.queue != Queue::Shared)
            .map(|(i, m)| (m.peer as usize, wr_id(i as u32, m.epoch)))
    }

    /// Every completed slot nobody took: (index, completion).
    pub(crate) fn done_slots(&self) -> impl Iterator<Item = (u32, Completion)> + '_ {
        self.meta
            .iter()
            .enumerate()
            .filter(|(_, m)| m.state == State::Done)
            .map(|(i, _)| (i as u32, self.done[i]))
    }

    /// The peer of the request a completion names, if it is ours (for a
    /// shared receive, the sender the completion names).
    pub(crate) fn peer_of(&self, c: &Completion) -> Option<usize> {
        let (index, epoch) = split(c.wr_id);
        self.meta
            .get(index as usize)
            .filter(|m| m.epoch == epoch && m.state == State::Pending)
            .and_then(|m| match m.peer {
                ANY_PEER => c.peer,
                p => Some(p),
            })
            .map(|p| p as usize)
    }

    /// The wr_ids of the shared receives still pending.
    pub(crate) fn shared_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.meta
            .iter()
            .enumerate()
            .filter(|(_, m)| m.state == State::Pending && m.queue == Queue::Shared)
            .map(|(i, m)| wr_id(i as u32, m.epoch))
    }

    /// Releases every shared receive still pending, as flushed: the
    /// transport promised it will neither touch nor report them.
    pub(crate) fn drop_shared(&mut self) {
        for i in 0..self.meta.len() as u32 {
            let m = self.meta[i as usize];
            if m.state == State::Pending && m.queue == Queue::Shared {
                self.outstanding_shared -= 1;
                self.release(i);
            }
        }
    }
}

/// A failed completion as an error naming its peer (`finish` filled it
/// in: the request's own, or for a shared receive the sender).
pub(crate) fn error_of(c: &Completion) -> CompletionError {
    let e = CompletionError::new(c.wr_id, c.status, c.vendor_err);
    match c.peer {
        Some(p) => e.with_peer(p as usize),
        None => e,
    }
}

#[cfg(test)]
mod tests;
