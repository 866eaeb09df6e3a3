//! Bookkeeping of outstanding work: one slot per posted request, found by
//! `wr_id`, preallocated so posting and routing never allocate.

use std::collections::VecDeque;

use ferrovia_verbs::{CompletionError, WcStatus};

use crate::op::Completion;
use crate::request::MAX_ELEMENTS;

/// A borrowed buffer a receive or read will hand back: raw because the
/// borrow (`&'env mut [u8]`) was moved into the request.
#[derive(Clone, Copy)]
pub(crate) struct RawBuf {
    pub(crate) ptr: *mut u8,
    /// Its element (address, length, key), to hand it back as a scatter.
    pub(crate) sge: ferrovia_verbs::Sge,
}

impl Default for RawBuf {
    fn default() -> Self {
        RawBuf {
            ptr: std::ptr::null_mut(),
            sge: ferrovia_verbs::Sge::default(),
        }
    }
}

// SAFETY: a RawBuf stands for an `&'env mut [u8]` moved into a request,
// which may be sent to another thread like the reference itself.
unsafe impl Send for RawBuf {}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queue {
    Send,
    Recv,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Free,
    Pending,
    Done(Completion),
}

pub(crate) struct Slot {
    pub(crate) epoch: u32,
    pub(crate) state: State,
    pub(crate) peer: usize,
    pub(crate) queue: Queue,
    /// Its handle was dropped: free it as soon as it completes.
    pub(crate) detached: bool,
    pub(crate) bufs: [RawBuf; MAX_ELEMENTS],
    pub(crate) nbufs: usize,
}

pub(crate) struct Slots {
    pub(crate) slots: Vec<Slot>,
    free: Vec<u32>,
    /// Per peer: send slots in posting order (completions arrive in it).
    send_rings: Vec<VecDeque<u32>>,
    pub(crate) outstanding_send: Vec<u32>,
    pub(crate) outstanding_recv: Vec<u32>,
    /// Errors of requests nobody will observe (detached handles).
    pub(crate) unobserved: Vec<CompletionError>,
    /// Handles dropped before their completion was taken (a manual scope
    /// reports them).
    pub(crate) dropped_unpolled: usize,
}

pub(crate) fn wr_id(index: u32, epoch: u32) -> u64 {
    (u64::from(epoch) << 32) | u64::from(index)
}

fn split(wr_id: u64) -> (u32, u32) {
    (wr_id as u32, (wr_id >> 32) as u32)
}

impl Slots {
    pub(crate) fn new(send_depths: &[u32], recv_depths: &[u32]) -> Slots {
        let outstanding: u64 = send_depths
            .iter()
            .chain(recv_depths)
            .map(|&d| u64::from(d))
            .sum();
        // Twice the queue depths: room for completed handles the program
        // still holds while the queues are full again.
        let cap = (2 * outstanding).clamp(1, u64::from(u32::MAX)) as u32;
        Slots {
            slots: (0..cap)
                .map(|_| Slot {
                    epoch: 0,
                    state: State::Free,
                    peer: 0,
                    queue: Queue::Send,
                    detached: false,
                    bufs: [RawBuf::default(); MAX_ELEMENTS],
                    nbufs: 0,
                })
                .collect(),
            free: (0..cap).rev().collect(),
            send_rings: send_depths
                .iter()
                .map(|&d| VecDeque::with_capacity(d as usize))
                .collect(),
            outstanding_send: vec![0; send_depths.len()],
            outstanding_recv: vec![0; recv_depths.len()],
            unobserved: Vec::with_capacity(16),
            dropped_unpolled: 0,
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
            .sum()
    }

    /// Takes a slot for a request about to be posted; returns (index, epoch).
    pub(crate) fn alloc(
        &mut self,
        peer: usize,
        queue: Queue,
        bufs: &[RawBuf],
    ) -> Option<(u32, u32)> {
        let index = self.free.pop()?;
        let slot = &mut self.slots[index as usize];
        slot.epoch = slot.epoch.wrapping_add(1);
        slot.state = State::Pending;
        slot.peer = peer;
        slot.queue = queue;
        slot.detached = false;
        slot.nbufs = bufs.len();
        slot.bufs[..bufs.len()].copy_from_slice(bufs);
        match queue {
            Queue::Send => {
                self.send_rings[peer].push_back(index);
                self.outstanding_send[peer] += 1;
            }
            Queue::Recv => self.outstanding_recv[peer] += 1,
        }
        Some((index, slot.epoch))
    }

    /// Undoes `alloc` for a request the transport refused to post.
    pub(crate) fn unpost(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        match slot.queue {
            Queue::Send => {
                let ring = &mut self.send_rings[slot.peer];
                if let Some(pos) = ring.iter().rposition(|&i| i == index) {
                    ring.remove(pos);
                }
                self.outstanding_send[slot.peer] -= 1;
            }
            Queue::Recv => self.outstanding_recv[slot.peer] -= 1,
        }
        self.release(index);
    }

    pub(crate) fn release(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        slot.state = State::Free;
        slot.nbufs = 0;
        self.free.push(index);
    }

    /// Records a completion. A send completion also completes the
    /// unsignalled sends posted before it to the same peer.
    pub(crate) fn route(&mut self, c: Completion) {
        let (index, epoch) = split(c.wr_id);
        let Some(slot) = self.slots.get(index as usize) else {
            return;
        };
        if slot.epoch != epoch || slot.state != State::Pending {
            return; // not ours (stale or foreign wr_id): nothing to update
        }
        let peer = slot.peer;
        match slot.queue {
            Queue::Recv => {
                self.outstanding_recv[peer] -= 1;
                self.finish(index, c);
            }
            Queue::Send => {
                while let Some(earlier) = self.send_rings[peer].pop_front() {
                    self.outstanding_send[peer] -= 1;
                    if earlier == index {
                        break;
                    }
                    let g = self.slots[earlier as usize].epoch;
                    self.finish(
                        earlier,
                        Completion {
                            wr_id: wr_id(earlier, g),
                            ..Completion::default()
                        },
                    );
                }
                self.finish(index, c);
            }
        }
    }

    fn finish(&mut self, index: u32, c: Completion) {
        let slot = &mut self.slots[index as usize];
        if slot.detached {
            if c.status != WcStatus::SUCCESS {
                self.unobserved.push(error_of(&c));
            }
            self.release(index);
        } else {
            slot.state = State::Done(c);
        }
    }

    /// The state of the slot a handle refers to, if it still does.
    pub(crate) fn state(&self, index: u32, epoch: u32) -> Option<State> {
        let slot = &self.slots[index as usize];
        (slot.epoch == epoch && slot.state != State::Free).then_some(slot.state)
    }

    /// Called when a handle is dropped unobserved.
    pub(crate) fn detach(&mut self, index: u32, epoch: u32) {
        if self.state(index, epoch).is_some() {
            self.dropped_unpolled += 1;
        }
        match self.state(index, epoch) {
            Some(State::Pending) => self.slots[index as usize].detached = true,
            Some(State::Done(c)) => {
                if c.status != WcStatus::SUCCESS {
                    self.unobserved.push(error_of(&c));
                }
                self.release(index);
            }
            Some(State::Free) | None => {}
        }
    }

    /// Detaches a request whose handle was never handed out (a list post
    /// that failed later on): like `detach`, but not counted as unpolled.
    pub(crate) fn detach_silently(&mut self, index: u32, epoch: u32) {
        let unpolled = self.dropped_unpolled;
        self.detach(index, epoch);
        self.dropped_unpolled = unpolled;
    }

    /// wr_ids of everything still pending.
    pub(crate) fn pending_ids(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state == State::Pending)
            .map(|(i, s)| (s.peer, wr_id(i as u32, s.epoch)))
    }
}

pub(crate) fn error_of(c: &Completion) -> CompletionError {
    CompletionError {
        wr_id: c.wr_id,
        status: c.status,
        vendor_err: c.vendor_err,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(s: &Slots, (i, g): (u32, u32)) -> Option<Completion> {
        match s.state(i, g) {
            Some(State::Done(c)) => Some(c),
            _ => None,
        }
    }

    #[test]
    fn a_signalled_send_completes_the_unsignalled_ones_before_it() {
        let mut s = Slots::new(&[4, 4], &[4, 4]);
        let a = s.alloc(0, Queue::Send, &[]).unwrap();
        let b = s.alloc(0, Queue::Send, &[]).unwrap();
        let other_peer = s.alloc(1, Queue::Send, &[]).unwrap();
        let c = s.alloc(0, Queue::Send, &[]).unwrap();
        assert_eq!(s.pending(), 4);
        s.route(Completion {
            wr_id: wr_id(c.0, c.1),
            byte_len: 9,
            ..Default::default()
        });
        assert!(done(&s, a).is_some() && done(&s, b).is_some());
        assert_eq!(done(&s, c).unwrap().byte_len, 9);
        assert!(
            done(&s, other_peer).is_none(),
            "another peer's queue is independent"
        );
        assert_eq!(s.outstanding_send, vec![0, 1]);
    }

    #[test]
    fn stale_and_foreign_wr_ids_are_ignored() {
        let mut s = Slots::new(&[2], &[2]);
        let a = s.alloc(0, Queue::Recv, &[]).unwrap();
        s.route(Completion {
            wr_id: wr_id(a.0, a.1 + 1),
            ..Default::default()
        });
        s.route(Completion {
            wr_id: u64::MAX,
            ..Default::default()
        });
        assert!(done(&s, a).is_none());
        assert_eq!(s.pending(), 1);
    }

    #[test]
    fn detached_slots_free_on_completion_and_keep_errors() {
        let mut s = Slots::new(&[2], &[2]);
        let free_before = s.free.len();
        let a = s.alloc(0, Queue::Recv, &[]).unwrap();
        s.detach(a.0, a.1);
        s.route(Completion {
            wr_id: wr_id(a.0, a.1),
            status: WcStatus::WR_FLUSH_ERR,
            ..Default::default()
        });
        assert_eq!(s.free.len(), free_before);
        assert_eq!(s.unobserved.len(), 1);
        assert_eq!(s.unobserved[0].status, WcStatus::WR_FLUSH_ERR);
        // The slot is reused with a new generation.
        let b = s.alloc(0, Queue::Recv, &[]).unwrap();
        assert_eq!(b.0, a.0);
        assert_ne!(b.1, a.1);
        assert!(s.state(a.0, a.1).is_none());
    }
}
