//! The verbs transport's queue pairs, one per peer, each replaceable by a
//! fresh one (a reconnect) while the others keep running.
//!
//! Posting reads a peer's QP with one load and no lock, through a
//! [`QpRef`] that counts itself as a reader of that peer's slot. A
//! replaced QP is retired, and freed once its slot has no reader, except
//! the most recent one, kept one reconnect longer as a margin for
//! completions of the old QP still in the CQ (a provider may purge a
//! destroyed QP's entries from its CQ). So a peer holds at most two QPs
//! (plus any a long-lived reader pins), however often it reconnects:
//! the table used to keep every QP it ever held, and a soak's thousands
//! of reconnects grew a rank's memory past 250 MB.
//!
//! Why freeing is safe: a reader adds itself to `readers` before it loads
//! `current`, and a replacer swaps `current` before it reads `readers`,
//! all sequentially consistent. So either the replacer sees the reader
//! (and frees nothing), or the reader loads the new QP. A retired QP is
//! freed only under the slot's lock after `readers` was seen at zero, and
//! every reader that could hold it added itself before that QP was
//! retired.

use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering::SeqCst};

use ferrovia_verbs::QueuePair;

/// How many retired QPs a slot keeps after their readers are gone.
const KEEP_RETIRED: usize = 1;

/// The current QP of every peer (generic so the tests can count drops).
pub(crate) struct QpTable<T = QueuePair> {
    slots: Box<[Slot<T>]>,
}

/// One peer's QP, its readers and its retired QPs. Aligned to keep two
/// peers' reader counts off one cache line.
#[repr(align(128))]
struct Slot<T> {
    /// From `Box::into_raw`; owned by the slot until retired.
    current: AtomicPtr<T>,
    readers: AtomicUsize,
    /// Set while `retired` holds more than [`KEEP_RETIRED`], so the last
    /// reader to leave knows to free them without taking the lock.
    excess: AtomicBool,
    /// Replaced QPs, oldest first, each from `Box::into_raw`. Raw, not
    /// boxes: a `Box` asserts it is unique when moved, and readers may
    /// still share these.
    retired: Mutex<Vec<NonNull<T>>>,
}

// SAFETY: the table owns its `T`s (the raw pointers are boxes it frees
// once) and hands out only shared references to them, from any thread:
// that needs `T: Send + Sync`.
unsafe impl<T: Send + Sync> Send for QpTable<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for QpTable<T> {}

/// A shared reference to a peer's QP, valid while it lives: the QP it
/// points to is not freed before it is dropped, even if the peer
/// reconnects meanwhile (it then points to the old QP, in the error
/// state).
pub struct QpRef<'a, T = QueuePair> {
    slot: &'a Slot<T>,
    qp: &'a T,
}

impl<T> Deref for QpRef<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.qp
    }
}

impl<T> Drop for QpRef<'_, T> {
    fn drop(&mut self) {
        if self.slot.readers.fetch_sub(1, SeqCst) == 1 && self.slot.excess.load(SeqCst) {
            self.slot.reclaim();
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for QpRef<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.qp.fmt(f)
    }
}

impl<T> QpTable<T> {
    /// A table of `qps`, which must not be empty.
    pub(crate) fn new(qps: Vec<T>) -> QpTable<T> {
        assert!(!qps.is_empty(), "a QP table needs a QP");
        let slots = qps
            .into_iter()
            .map(|qp| Slot {
                current: AtomicPtr::new(Box::into_raw(Box::new(qp))),
                readers: AtomicUsize::new(0),
                excess: AtomicBool::new(false),
                retired: Mutex::new(Vec::new()),
            })
            .collect();
        QpTable { slots }
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The current QP of `peer`.
    pub(crate) fn get(&self, peer: usize) -> Option<QpRef<'_, T>> {
        let slot = self.slots.get(peer)?;
        slot.readers.fetch_add(1, SeqCst);
        let p = slot.current.load(SeqCst);
        // SAFETY: `p` came from `Box::into_raw` (in `new` or `replace`).
        // It is freed only by `reclaim` (after it was retired, under the
        // lock, with `readers` seen at zero after the retirement) or when
        // the table drops; this reader counted itself before loading `p`,
        // so `p` was current or retired after that count, and it stays
        // counted until the `QpRef` drops, which the borrow of `self`
        // keeps before the table's drop. Only shared references are made.
        let qp = unsafe { &*p };
        Some(QpRef { slot, qp })
    }

    /// Makes `qp` the QP of `peer`. The one it replaces is retired: freed
    /// once no [`QpRef`] points to it and a newer one is retired too.
    pub(crate) fn replace(&self, peer: usize, qp: T) {
        let slot = &self.slots[peer];
        let new = Box::into_raw(Box::new(qp));
        let mut retired = slot.retired.lock().unwrap_or_else(|e| e.into_inner());
        let old = slot.current.swap(new, SeqCst);
        retired.push(NonNull::new(old).expect("a slot's QP is never null"));
        slot.excess.store(retired.len() > KEEP_RETIRED, SeqCst);
        let freed = slot.take_excess(&mut retired);
        drop(retired);
        drop(freed);
    }

    /// Every current QP, by peer.
    pub(crate) fn iter(&self) -> impl Iterator<Item = QpRef<'_, T>> {
        (0..self.len()).filter_map(|p| self.get(p))
    }

    /// QPs held, current and retired (for the tests).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.slots
            .iter()
            .map(|s| 1 + s.retired.lock().map_or(0, |r| r.len()))
            .sum()
    }
}

impl<T> Slot<T> {
    /// Frees the excess retired QPs if the slot has no reader now.
    fn reclaim(&self) {
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        let freed = self.take_excess(&mut retired);
        drop(retired);
        drop(freed);
    }

    /// With the lock held: the excess retired QPs as boxes to drop (after
    /// the lock is released: a QP's drop calls into the provider), if no
    /// reader is counted; nothing otherwise.
    fn take_excess(&self, retired: &mut Vec<NonNull<T>>) -> Vec<Box<T>> {
        if retired.len() <= KEEP_RETIRED || self.readers.load(SeqCst) != 0 {
            return Vec::new();
        }
        let n = retired.len() - KEEP_RETIRED;
        let freed = retired
            .drain(..n)
            // SAFETY: each was made by `Box::into_raw`, retired under this
            // lock before `readers` was seen at zero just now, so no
            // reader holds it (module docs), and it leaves `retired` here,
            // so it is turned back into a box once.
            .map(|p| unsafe { Box::from_raw(p.as_ptr()) })
            .collect();
        self.excess.store(false, SeqCst);
        freed
    }
}

impl<T> Drop for Slot<T> {
    fn drop(&mut self) {
        let retired = std::mem::take(self.retired.get_mut().unwrap_or_else(|e| e.into_inner()));
        for p in retired
            .into_iter()
            .chain(NonNull::new(*self.current.get_mut()))
        {
            // SAFETY: `&mut self`: no `QpRef` borrows the table any more;
            // every pointer is a box the slot owns, freed once here.
            drop(unsafe { Box::from_raw(p.as_ptr()) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    /// A stand-in QP that knows whether it was freed, and counts drops.
    struct Fake {
        alive: u64,
        id: u64,
        drops: Arc<AtomicU64>,
    }

    const ALIVE: u64 = 0x51ee_9a11_7e5a_11ee;

    impl Fake {
        fn new(id: u64, drops: &Arc<AtomicU64>) -> Fake {
            Fake {
                alive: ALIVE,
                id,
                drops: drops.clone(),
            }
        }
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            assert_eq!(self.alive, ALIVE, "QP {} freed twice", self.id);
            self.alive = 0;
            self.drops.fetch_add(1, SeqCst);
        }
    }

    #[test]
    fn replaced_qps_are_freed_but_the_last_one() {
        let drops = Arc::new(AtomicU64::new(0));
        let t = QpTable::new(vec![Fake::new(0, &drops), Fake::new(1, &drops)]);
        for i in 2..1002 {
            t.replace(1, Fake::new(i, &drops));
        }
        assert_eq!(t.get(1).map(|q| q.id), Some(1001));
        assert_eq!(t.get(0).map(|q| q.id), Some(0));
        // Peer 0 holds one QP, peer 1 its current and one retired.
        assert_eq!(t.held(), 3);
        assert_eq!(drops.load(SeqCst), 999);
        drop(t);
        assert_eq!(drops.load(SeqCst), 1002);
    }

    #[test]
    fn a_reader_keeps_its_qp_until_it_drops() {
        let drops = Arc::new(AtomicU64::new(0));
        let t = QpTable::new(vec![Fake::new(0, &drops)]);
        let held = t.get(0).expect("peer 0");
        for i in 1..10 {
            t.replace(0, Fake::new(i, &drops));
        }
        // The reader pins every QP retired while it reads.
        assert_eq!(drops.load(SeqCst), 0);
        assert_eq!(held.alive, ALIVE);
        assert_eq!(held.id, 0);
        drop(held);
        // Its leaving frees all but the last retired one.
        assert_eq!(drops.load(SeqCst), 8);
        assert_eq!(t.held(), 2);
    }

    /// Readers on several threads, each checking the QP it holds is not
    /// freed, while another thread replaces it as fast as it can; the
    /// table's size stays bounded throughout.
    #[test]
    fn readers_never_see_a_freed_qp_while_it_is_replaced() {
        let drops = Arc::new(AtomicU64::new(0));
        let t = QpTable::new(vec![Fake::new(0, &drops), Fake::new(1, &drops)]);
        let made = AtomicU64::new(2);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    let mut seen = 0u64;
                    while !stop.load(SeqCst) {
                        for peer in 0..2 {
                            let q = t.get(peer).expect("peer");
                            assert_eq!(q.alive, ALIVE, "QP {} read after it was freed", q.id);
                            seen = seen.max(q.id);
                            std::hint::spin_loop();
                            assert_eq!(q.alive, ALIVE, "QP {} freed while read", q.id);
                        }
                    }
                    assert!(seen >= 1);
                });
            }
            for _ in 0..100_000 {
                let id = made.fetch_add(1, SeqCst);
                t.replace((id % 2) as usize, Fake::new(id, &drops));
            }
            stop.store(true, SeqCst);
        });
        let made = made.load(SeqCst);
        // No reader now: the last reader to leave, or the last replace,
        // freed every excess QP.
        assert_eq!(t.held(), 4);
        assert_eq!(drops.load(SeqCst), made - 4);
    }
}
