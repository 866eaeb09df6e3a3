//! The memory every rank exposes for synchronisation: one signal counter
//! per peer, a probe word, and a directory of remote-region descriptors.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Acquire};

use ferrovia_mr::{
    MrRegistry, RegisterOptions, RegisteredBuffer, RemoteMemoryRegion, WIRE_MAX_LEN,
};

use crate::error::NodeError;

/// Bytes per directory entry: a length byte and a wire-form descriptor.
pub(crate) const DIR_SLOT: usize = 32;
const _: () = assert!(WIRE_MAX_LEN < DIR_SLOT);

/// This rank's synchronisation state.
pub(crate) struct SyncRegion {
    /// Peers write here: `[counters; n][probe][directory; n]`.
    pub(crate) flags: RegisteredBuffer,
    /// Sources of the counter writes, one word per target rank.
    pub(crate) src: RegisteredBuffer,
    /// Source of directory writes.
    pub(crate) dir_src: RegisteredBuffer,
    /// Every rank's `flags` region.
    pub(crate) remote: Vec<RemoteMemoryRegion>,
    /// Signals sent to each rank, and signals consumed from each rank.
    pub(crate) sent: Vec<Cell<u64>>,
    pub(crate) seen: Vec<Cell<u64>>,
    n: usize,
}

impl SyncRegion {
    pub(crate) fn new(registry: &MrRegistry, n: usize) -> Result<SyncRegion, NodeError> {
        let exposed = RegisterOptions::local()
            .allow_remote_write()
            .allow_remote_read();
        Ok(SyncRegion {
            flags: registry.alloc(Self::flags_len(n), exposed)?,
            src: registry.alloc(8 * n, RegisterOptions::local())?,
            dir_src: registry.alloc(DIR_SLOT, RegisterOptions::local())?,
            remote: Vec::new(),
            sent: (0..n).map(|_| Cell::new(0)).collect(),
            seen: (0..n).map(|_| Cell::new(0)).collect(),
            n,
        })
    }

    fn flags_len(n: usize) -> usize {
        8 * n + 8 + DIR_SLOT * n
    }

    pub(crate) fn probe_offset(&self) -> u64 {
        8 * self.n as u64
    }

    pub(crate) fn dir_offset(&self, rank: usize) -> u64 {
        (8 * self.n + 8 + DIR_SLOT * rank) as u64
    }

    fn words(buf: &RegisteredBuffer) -> &[AtomicU64] {
        // Memory from MrRegistry::alloc is page-aligned.
        buf.as_atomic_u64s().unwrap_or(&[])
    }

    /// The counter peers bump when they signal this rank from `from`.
    pub(crate) fn counter(&self, from: usize) -> u64 {
        Self::words(&self.flags)
            .get(from)
            .map_or(0, |w| w.load(Acquire))
    }

    pub(crate) fn src_word(&self, to: usize) -> &AtomicU64 {
        &Self::words(&self.src)[to]
    }

    /// The directory entry rank `from` wrote here, if any.
    pub(crate) fn dir_entry(&self, from: usize) -> Option<Vec<u8>> {
        let start = self.dir_offset(from) as usize;
        let bytes = &self.flags.as_atomic_bytes()[start..start + DIR_SLOT];
        let len = bytes[0].load(Acquire) as usize;
        (len > 0 && len < DIR_SLOT)
            .then(|| bytes[1..=len].iter().map(|b| b.load(Acquire)).collect())
    }
}
