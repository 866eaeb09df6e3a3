//! The side tables of owned requests (`crate::owned`): the buffer each one
//! holds, the waker of the future waiting on it, and where buffers go
//! when nobody takes them. Kept apart from the slot table's hot part, and
//! allocated on the first owned post, so scoped programs pay nothing.

use std::collections::VecDeque;
use std::task::Waker;
use std::time::Instant;

use std::sync::Arc;

use crate::op::Completion;
use crate::owned_buf::{OwnedBuf, Returned};
use crate::pieces::Lease;

#[derive(Default)]
pub(crate) struct OwnedSlots {
    /// Per slot: the buffer of the owned request in it.
    bufs: Vec<Option<OwnedBuf>>,
    /// Per slot: who to wake when it completes.
    wakers: Vec<Option<Waker>>,
    /// Per slot: whether the request is outbound (a send, write or
    /// atomic: see `OwnedKind::outbound`).
    outbound: Vec<bool>,
    /// Wakers of completed requests, woken once the engine's state is no
    /// longer borrowed.
    pub(crate) to_wake: Vec<Waker>,
    /// Futures waiting for queue room or a free slot: woken by any
    /// completion.
    pub(crate) room_waiters: Vec<Waker>,
    /// Buffers of requests nobody took (given up on, or collected by a
    /// drain), with their completions.
    pub(crate) returned: Vec<Returned>,
    /// Requests given up on while pending, oldest first: (when, index,
    /// epoch). Past the deadline their peer is flushed.
    pub(crate) abandoned: VecDeque<(Instant, u32, u32)>,
    /// Per slot: the lease a run of owned pieces holds (its last piece's
    /// slot holds it for the whole run; `crate::post_pieces`).
    keeps: Vec<Option<Arc<Lease<'static>>>>,
}

impl OwnedSlots {
    /// Makes room for `slots` slots (the first owned post).
    pub(crate) fn ensure(&mut self, slots: usize) {
        if self.bufs.len() < slots {
            self.bufs.resize_with(slots, || None);
            self.wakers.resize_with(slots, || None);
            self.outbound.resize(slots, false);
            self.keeps.resize_with(slots, || None);
        }
    }

    /// The run of owned pieces ending at `index` holds `lease` until it
    /// is done (outbound, for shutdowns: writes and reads alike wait).
    pub(crate) fn keep(&mut self, index: u32, lease: &Arc<Lease<'static>>) {
        self.keeps[index as usize] = Some(lease.clone());
        self.outbound[index as usize] = true;
    }

    /// Stores what a just-posted request at `index` holds, and whether it
    /// is outbound.
    pub(crate) fn hold(
        &mut self,
        index: u32,
        buf: OwnedBuf,
        waker: Option<&Waker>,
        outbound: bool,
    ) {
        self.bufs[index as usize] = Some(buf);
        self.wakers[index as usize] = waker.cloned();
        self.outbound[index as usize] = outbound;
    }

    /// Whether the owned request at `index` is outbound.
    pub(crate) fn is_outbound(&self, index: u32) -> bool {
        self.outbound.get(index as usize).copied().unwrap_or(false)
    }

    /// Takes the buffer back (a refused post, or the completed request's
    /// owner taking it).
    pub(crate) fn take(&mut self, index: u32) -> Option<OwnedBuf> {
        self.wakers[index as usize] = None;
        self.bufs[index as usize].take()
    }

    /// Forgets who to wake for the request at `index`.
    pub(crate) fn take_waker(&mut self, index: u32) {
        self.wakers[index as usize] = None;
    }

    /// Sets who to wake when the request at `index` completes.
    pub(crate) fn set_waker(&mut self, index: u32, waker: &Waker) {
        match &mut self.wakers[index as usize] {
            Some(w) if w.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
    }

    /// The request at `index` completed: its waker is due.
    pub(crate) fn completed(&mut self, index: u32) {
        if let Some(w) = self.wakers[index as usize].take() {
            self.to_wake.push(w);
        }
    }

    /// The slot at `index` is freed while it still holds a buffer: keep
    /// the buffer, with the completion, for whoever collects returns.
    pub(crate) fn release(&mut self, index: u32, completion: Completion) {
        self.wakers[index as usize] = None;
        if let Some(buf) = self.bufs[index as usize].take() {
            self.returned.push(Returned { completion, buf });
        }
        // The device is done with the run: its hold on the lease ends.
        if let Some(k) = self.keeps.get_mut(index as usize) {
            k.take();
        }
    }

    /// Queue room may have freed: wake whoever waits for it.
    pub(crate) fn room_freed(&mut self) {
        if !self.room_waiters.is_empty() {
            self.to_wake.append(&mut self.room_waiters);
        }
    }

    /// Gives up every buffer still held without freeing it (the engine is
    /// dropped while the device may still use them, and its flush never
    /// completed).
    pub(crate) fn leak_all(&mut self) {
        for b in self.bufs.iter_mut().filter_map(Option::take) {
            std::mem::forget(b);
        }
        for k in self.keeps.iter_mut().filter_map(Option::take) {
            std::mem::forget(k);
        }
    }
}
