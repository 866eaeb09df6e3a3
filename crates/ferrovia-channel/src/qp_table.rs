//! The verbs transport's queue pairs, one per peer, each replaceable by a
//! fresh one (a reconnect) while the others keep running. Posting reads
//! a peer's QP with one load and no lock; a replaced QP stays alive until
//! the table is dropped, so a reference taken before the swap never
//! dangles.

use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, Ordering};

use ferrovia_verbs::QueuePair;

/// The current QP of every peer.
pub(crate) struct QpTable {
    current: Box<[AtomicPtr<QueuePair>]>,
    /// Every QP the table ever held, current or replaced. Boxed: the
    /// pointers in `current` point into these boxes, which never move.
    #[expect(
        clippy::vec_box,
        reason = "the boxes keep each QP in place when the Vec grows"
    )]
    owned: Mutex<Vec<Box<QueuePair>>>,
}

impl QpTable {
    /// A table of `qps`, which must not be empty.
    pub(crate) fn new(qps: Vec<QueuePair>) -> QpTable {
        assert!(!qps.is_empty(), "a QP table needs a QP");
        let owned: Vec<Box<QueuePair>> = qps.into_iter().map(Box::new).collect();
        let current = owned
            .iter()
            .map(|b| AtomicPtr::new(std::ptr::from_ref::<QueuePair>(&**b).cast_mut()))
            .collect();
        QpTable {
            current,
            owned: Mutex::new(owned),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.current.len()
    }

    /// The current QP of `peer`.
    pub(crate) fn get(&self, peer: usize) -> Option<&QueuePair> {
        let p = self.current.get(peer)?.load(Ordering::Acquire);
        // SAFETY: `p` came from a `Box` in `owned` (in `new` or `replace`,
        // published with Release after the box was pushed). Boxes in
        // `owned` are never dropped or moved out before the table is
        // dropped, and this borrow of `self` keeps the table alive, so the
        // QP outlives the returned reference. Only shared references to it
        // are ever made.
        Some(unsafe { &*p })
    }

    /// Makes `qp` the QP of `peer`; the one it replaces stays allocated
    /// (in the error state, idle) until the table is dropped.
    pub(crate) fn replace(&self, peer: usize, qp: QueuePair) {
        let b = Box::new(qp);
        let p = std::ptr::from_ref::<QueuePair>(&*b).cast_mut();
        let mut owned = self.owned.lock().unwrap_or_else(|e| e.into_inner());
        owned.push(b);
        self.current[peer].store(p, Ordering::Release);
    }

    /// Every current QP, by peer.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &QueuePair> {
        (0..self.len()).filter_map(|p| self.get(p))
    }
}
