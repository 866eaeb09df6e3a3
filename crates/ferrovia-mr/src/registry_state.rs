//! The state behind a registry: the registrar, the table of live
//! registrations and the counters. Every registration holds it, to leave
//! the table when its last handle drops; the registry's API
//! (`registry`) works on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use parking_lot::RwLock;

use ferrovia_types::AccessFlags;

use crate::error::MrError;
use crate::registrar::Registrar;
use crate::segment::Segment;
use crate::stats::Counters;
use crate::table::Table;
use crate::view::MemoryRegionView;

/// What every clone of an [`MrRegistry`](crate::MrRegistry) shares, and
/// what each registration keeps to take itself out when its last handle
/// drops.
pub(crate) struct RegistryInner {
    pub(crate) registrar: Box<dyn Registrar>,
    /// Live registrations by address range (a B+ tree that answers
    /// interval queries, see `table`).
    pub(crate) table: RwLock<Table<Entry>>,
    pub(crate) next_id: AtomicUsize,
    pub(crate) counters: Counters,
}

/// What a lookup needs, stored in the table itself so a hit touches no
/// segment behind a pointer.
pub(crate) struct Entry {
    pub(crate) rdma_base: u64,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    pub(crate) access: AccessFlags,
    pub(crate) seg: Arc<Segment>,
}

impl Entry {
    /// The view of `len` bytes at `addr` of this entry's registration,
    /// which starts at `start` and covers them.
    pub(crate) fn view(
        &self,
        start: usize,
        id: usize,
        addr: usize,
        len: usize,
    ) -> MemoryRegionView {
        MemoryRegionView {
            id,
            virtual_addr: addr,
            rdma_addr: (self.rdma_base as usize).wrapping_add(addr - start),
            size: len,
            lkey: self.lkey,
            rkey: self.rkey,
            access: self.access,
        }
    }
}

impl RegistryInner {
    /// Removes `seg` from the table if the caller's handle is its only
    /// one (the table holds the other `Arc`); clones are only made from a
    /// live handle or under this lock, so none can appear meanwhile.
    pub(crate) fn detach_unique(&self, seg: &Arc<Segment>) -> Result<(), MrError> {
        let mut table = self.table.write();
        let handles = Arc::strong_count(seg) - 1;
        if handles != 1 {
            return Err(MrError::StillShared { handles });
        }
        // The table's `Arc`; the caller's keeps the segment alive.
        drop(table.remove(seg.addr, seg.id));
        self.counters.live.fetch_sub(1, Relaxed);
        self.counters.bytes.fetch_sub(seg.len as u64, Relaxed);
        Ok(())
    }

    /// Called when a handle drops: deregisters if it was the last one.
    pub(crate) fn release(&self, seg: &Arc<Segment>) {
        let mut table = self.table.write();
        // Handles and the table hold the only Arcs; clones are made from a
        // live handle or under this lock, so 2 means "the table and me".
        if Arc::strong_count(seg) == 2 {
            // The table's `Arc`; the caller's keeps the segment (and its
            // keys) alive until after the lock is released.
            drop(table.remove(seg.addr, seg.id));
            self.counters.live.fetch_sub(1, Relaxed);
            self.counters.bytes.fetch_sub(seg.len as u64, Relaxed);
        }
    }
}
