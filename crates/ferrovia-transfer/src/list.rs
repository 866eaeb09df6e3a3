//! Descriptor lists: what a batch moves, entry by entry.

use std::ops::Range;

/// One entry: a local range of the segment a list is prepared on, a peer,
/// and where in that peer's segment the bytes go (a write) or come from (a
/// read): `remote_offset .. remote_offset + local.len()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Offsets in the local segment.
    pub local: Range<usize>,
    /// The peer (its rank).
    pub peer: usize,
    /// Offset in the peer's segment.
    pub remote_offset: u64,
}

/// Entries of a batch, in order: build it once, prepare it once
/// (`TransferEngine::prepare`), submit the prepared list as often as
/// needed, as writes or reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescriptorList {
    entries: Vec<Entry>,
}

impl DescriptorList {
    /// An empty list.
    pub fn new() -> DescriptorList {
        DescriptorList::default()
    }

    /// An empty list with room for `n` entries.
    pub fn with_capacity(n: usize) -> DescriptorList {
        DescriptorList {
            entries: Vec::with_capacity(n),
        }
    }

    /// Adds an entry; its index (what errors name).
    pub fn push(&mut self, local: Range<usize>, peer: usize, remote_offset: u64) -> usize {
        self.entries.push(Entry {
            local,
            peer,
            remote_offset,
        });
        self.entries.len() - 1
    }

    /// The entries.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Entries in all.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
