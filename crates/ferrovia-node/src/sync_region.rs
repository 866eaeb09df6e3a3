//! The memory every rank exposes for synchronisation: per peer a signal
//! counter, a query slot and an answer slot, and a directory of
//! remote-region descriptors.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Acquire};

use ferrovia_mr::{
    MrRegistry, RegisterOptions, RegisteredBuffer, RemoteMemoryRegion, SharedBuffer, WIRE_MAX_LEN,
};

use crate::error::NodeError;

/// Bytes per directory entry: a length byte and a wire-form descriptor.
pub(crate) const DIR_SLOT: usize = 32;
const _: () = assert!(WIRE_MAX_LEN < DIR_SLOT);

/// This rank's synchronisation state.
pub(crate) struct SyncRegion {
    /// Peers write here: `[counters; n][queries; n][answers; n][directory; n]`.
    pub(crate) flags: SharedBuffer,
    /// Sources: `[signals; n][answers; n][query]`, one word per target;
    /// shared because a word is stored while an earlier write of it may
    /// still be reading it.
    pub(crate) src: SharedBuffer,
    /// Source of directory writes.
    pub(crate) dir_src: RegisteredBuffer,
    /// Every rank's `flags` region.
    pub(crate) remote: Vec<RemoteMemoryRegion>,
    /// Signals sent to each rank, and signals consumed from each rank.
    pub(crate) sent: Vec<Cell<u64>>,
    pub(crate) seen: Vec<Cell<u64>>,
    /// The last query of each rank this one answered.
    pub(crate) answered: Vec<Cell<u64>>,
    /// Barriers this rank has entered.
    pub(crate) entered: Cell<u64>,
    /// Queries this rank has sent.
    pub(crate) queries: Cell<u64>,
    /// Directory gathers this rank has run.
    pub(crate) gathers: Cell<u64>,
    n: usize,
}

impl SyncRegion {
    pub(crate) fn new(registry: &MrRegistry, n: usize) -> Result<SyncRegion, NodeError> {
        let exposed = RegisterOptions::local()
            .allow_remote_write()
            .allow_remote_read();
        Ok(SyncRegion {
            flags: registry.alloc(Self::flags_len(n), exposed)?,
            src: registry.alloc(8 * (2 * n + 1), RegisterOptions::local().shared())?,
            dir_src: registry.alloc(DIR_SLOT, RegisterOptions::local())?,
            remote: Vec::new(),
            sent: (0..n).map(|_| Cell::new(0)).collect(),
            seen: (0..n).map(|_| Cell::new(0)).collect(),
            answered: (0..n).map(|_| Cell::new(0)).collect(),
            entered: Cell::new(0),
            queries: Cell::new(0),
            gathers: Cell::new(0),
            n,
        })
    }

    fn flags_len(n: usize) -> usize {
        24 * n + 2 * DIR_SLOT * n
    }

    /// Where rank `from` writes its queries to this region's owner.
    pub(crate) fn query_offset(&self, from: usize) -> u64 {
        (8 * (self.n + from)) as u64
    }

    /// Where rank `from` writes its answers to this region's owner.
    pub(crate) fn answer_offset(&self, from: usize) -> u64 {
        (8 * (2 * self.n + from)) as u64
    }

    /// Where rank `rank` writes its entry of gather number `round`. Two
    /// banks alternate: a rank can be at most one gather ahead of another
    /// (each gather ends in a barrier), so it never overwrites an entry
    /// a slower rank has yet to read.
    pub(crate) fn dir_offset(&self, round: u64, rank: usize) -> u64 {
        let bank = (round % 2) as usize;
        (24 * self.n + DIR_SLOT * (bank * self.n + rank)) as u64
    }

    /// Word `i` of the flags region.
    pub(crate) fn flag(&self, offset: u64) -> &AtomicU64 {
        &Self::words(&self.flags)[offset as usize / 8]
    }

    /// Source word for answers to `to`, and for queries.
    pub(crate) fn answer_src(&self, to: usize) -> (&AtomicU64, usize) {
        let i = self.n + to;
        (&Self::words(&self.src)[i], i * 8)
    }

    pub(crate) fn query_src(&self) -> (&AtomicU64, usize) {
        let i = 2 * self.n;
        (&Self::words(&self.src)[i], i * 8)
    }

    fn words(buf: &SharedBuffer) -> &[AtomicU64] {
        buf.as_atomic_u64s()
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
    pub(crate) fn dir_entry(&self, round: u64, from: usize) -> Option<Vec<u8>> {
        let start = self.dir_offset(round, from) as usize;
        let mut entry = [0u8; DIR_SLOT];
        self.flags.read_into(start, &mut entry).ok()?;
        let len = entry[0] as usize;
        (len > 0 && len < DIR_SLOT).then(|| entry[1..=len].to_vec())
    }
}
