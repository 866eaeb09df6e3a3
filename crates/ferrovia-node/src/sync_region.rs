//! The memory every rank exposes for synchronisation, and its layout.
//!
//! With `n` ranks and `R` = [`RING`] signal slots per sender, the exposed
//! (`flags`) region of a rank is, in 8-byte words unless said otherwise:
//!
//! ```text
//! [signals: n * R]  word from*R + s: rank `from`'s signal of pair count k
//!                   with k % R == s (see barrier::word)
//! [queries: n]      word n*R + from: the last query number of `from`
//! [answers: n]      word n*R + n + from: `from`'s answer to this rank's query
//! [reasons: n]      word n*R + 2n + from: why `from` last abandoned a barrier
//! [directory: 2 banks * n entries of DIR_SLOT bytes]  all_gather_remote
//! ```
//!
//! and its local source region, from which those words are written:
//!
//! ```text
//! [signals: n * R]  word to*R + s: the signal last sent to `to` in slot s
//! [answers: n]      word n*R + to: the last answer sent to `to`
//! [query: 1]        word n*R + n: the last query sent
//! [reasons: n]      word n*R + n + 1 + to: the last reason sent to `to`
//! [abandons: n * R] word n*R + 2n + 1 + to*R + s: the last abandon sent
//!                   to `to` in slot s
//! ```
//!
//! A source word per (target, slot), not per target: a write still in
//! flight from an earlier barrier reads its word when the NIC gets to it,
//! and the only later value that word can hold is a later signal for the
//! same slot, never one that belongs in another slot. Abandons have source
//! words of their own, so a signal write still in flight never carries an
//! abandon ahead of its reason, which is written just before it.
//!
//! Every access to the exposed region goes through the helpers below.

use std::sync::Arc;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Release},
};

use ferrovia_mr::{
    MrError, MrRegistry, RegisterOptions, RegisteredBuffer, RemoteMemoryRegion, SharedBuffer,
    WIRE_MAX_LEN,
};

use ferrovia_channel::TransportError;

use crate::error::NodeError;

/// Signal slots per sender at each receiver: a sender may be this many
/// barriers (with that receiver) ahead before it overwrites a signal the
/// receiver has yet to read. The barrier's ring; the region's layout.
pub(crate) const RING: usize = 4;

/// Bytes per directory entry: a length byte and a wire-form descriptor.
pub(crate) const DIR_SLOT: usize = 32;
const _: () = assert!(WIRE_MAX_LEN < DIR_SLOT);

/// Word indices of the source region with `n` ranks (layout above).
struct Src;

impl Src {
    fn signal(_n: usize, to: usize, slot: usize) -> usize {
        to * RING + slot
    }
    fn answer(n: usize, to: usize) -> usize {
        n * RING + to
    }
    fn query(n: usize) -> usize {
        n * RING + n
    }
    fn reason(n: usize, to: usize) -> usize {
        n * RING + n + 1 + to
    }
    fn abandon(n: usize, to: usize, slot: usize) -> usize {
        n * RING + 2 * n + 1 + to * RING + slot
    }
    fn words(n: usize) -> usize {
        2 * n * RING + 2 * n + 1
    }
}

/// This rank's synchronisation memory.
pub(crate) struct SyncRegion {
    /// Peers write here (layout above).
    flags: SharedBuffer,
    /// Sources of signal, answer and query writes (layout above): shared
    /// memory, since a word is stored while an earlier write of it may
    /// still be reading it. In an `Arc`, so the owned writes of an async
    /// barrier (`barrier::task`) can hold it until they complete.
    pub(crate) src: Arc<SharedBuffer>,
    /// Source of directory writes.
    pub(crate) dir_src: RegisteredBuffer,
    /// Every rank's `flags` region.
    pub(crate) remote: Vec<RemoteMemoryRegion>,
    /// Directory gathers this rank has run.
    pub(crate) gathers: std::cell::Cell<u64>,
    n: usize,
}

impl SyncRegion {
    pub(crate) fn new(registry: &MrRegistry, n: usize) -> Result<SyncRegion, NodeError> {
        let exposed = RegisterOptions::local()
            .allow_remote_write()
            .allow_remote_read();
        Ok(SyncRegion {
            flags: registry.alloc(Self::words_before_dir(n) * 8 + 2 * DIR_SLOT * n, exposed)?,
            src: Arc::new(registry.alloc(8 * Src::words(n), RegisterOptions::local().shared())?),
            dir_src: registry.alloc(DIR_SLOT, RegisterOptions::local())?,
            remote: Vec::new(),
            gathers: std::cell::Cell::new(0),
            n,
        })
    }

    fn words_before_dir(n: usize) -> usize {
        n * RING + 3 * n
    }

    /// The 8-byte word at `at` of peer `to`'s exposed region, for a write
    /// of one of this rank's words there (both barrier fabrics post so).
    pub(crate) fn peer_word(
        &self,
        to: usize,
        at: u64,
    ) -> Result<RemoteMemoryRegion, TransportError> {
        let region = self.remote.get(to).ok_or(TransportError::NoSuchPeer {
            peer: to,
            count: self.remote.len(),
        })?;
        Ok(region.sub_region(at, 8)?)
    }

    /// The descriptor peers write this rank's exposed region through.
    pub(crate) fn exposed(&self) -> Result<RemoteMemoryRegion, MrError> {
        self.flags.registration().remote()
    }

    /// Where rank `from` writes its signal slot `slot` in its owner's
    /// region.
    pub(crate) fn signal_offset(&self, from: usize, slot: usize) -> u64 {
        (8 * (from * RING + slot)) as u64
    }

    /// Where rank `from` writes its queries to this region's owner.
    pub(crate) fn query_offset(&self, from: usize) -> u64 {
        (8 * (self.n * RING + from)) as u64
    }

    /// Where rank `from` writes its answers to this region's owner.
    pub(crate) fn answer_offset(&self, from: usize) -> u64 {
        (8 * (self.n * RING + self.n + from)) as u64
    }

    /// Where rank `from` writes its abandon reasons to this region's owner.
    pub(crate) fn reason_offset(&self, from: usize) -> u64 {
        (8 * (self.n * RING + 2 * self.n + from)) as u64
    }

    /// Where rank `rank` writes its entry of gather number `round`. Two
    /// banks alternate: a rank can be at most one gather ahead of another
    /// (each gather ends in a barrier), so it never overwrites an entry
    /// a slower rank has yet to read.
    pub(crate) fn dir_offset(&self, round: u64, rank: usize) -> u64 {
        let bank = (round % 2) as usize;
        (8 * Self::words_before_dir(self.n) + DIR_SLOT * (bank * self.n + rank)) as u64
    }

    /// Clears every word rank `from` writes here (its signals, query,
    /// answer and abandon reason): a new member of that rank starts from
    /// nothing, and an old member's words would read as its own.
    pub(crate) fn reset_from(&self, from: usize) {
        if from >= self.n {
            return;
        }
        let words = Self::words(&self.flags);
        let offsets = (0..RING).map(|s| self.signal_offset(from, s)).chain([
            self.query_offset(from),
            self.answer_offset(from),
            self.reason_offset(from),
        ]);
        for at in offsets {
            if let Some(w) = words.get(at as usize / 8) {
                w.store(0, Release);
            }
        }
    }

    /// The word at byte `offset` of the exposed region (0 out of range).
    fn load(&self, offset: u64) -> u64 {
        Self::words(&self.flags)
            .get(offset as usize / 8)
            .map_or(0, |w| w.load(Acquire))
    }

    /// The word rank `from` last wrote into its signal slot `slot` here.
    pub(crate) fn signal_word(&self, from: usize, slot: usize) -> u64 {
        if slot >= RING {
            return 0;
        }
        self.load(self.signal_offset(from, slot))
    }

    /// The last query number rank `from` wrote here.
    pub(crate) fn query_word(&self, from: usize) -> u64 {
        if from >= self.n {
            return 0;
        }
        self.load(self.query_offset(from))
    }

    /// The last answer rank `from` wrote here.
    pub(crate) fn answer_word(&self, from: usize) -> u64 {
        if from >= self.n {
            return 0;
        }
        self.load(self.answer_offset(from))
    }

    /// The last abandon reason rank `from` wrote here.
    pub(crate) fn reason_word(&self, from: usize) -> u64 {
        if from >= self.n {
            return 0;
        }
        self.load(self.reason_offset(from))
    }

    /// The source word of signals to `to` in slot `slot`, and its byte
    /// offset in `src`.
    pub(crate) fn signal_src(&self, to: usize, slot: usize) -> Option<(&AtomicU64, usize)> {
        if to >= self.n || slot >= RING {
            return None;
        }
        self.src_word(Src::signal(self.n, to, slot))
    }

    /// Stages `word` as this rank's (`me`'s) signal to `to` in `slot`:
    /// stores it in its source word and returns where the write goes,
    /// (offset in `src`, offset in `to`'s region).
    pub(crate) fn stage_signal(
        &self,
        me: usize,
        to: usize,
        slot: usize,
        word: u64,
    ) -> Result<(usize, u64), TransportError> {
        let (src, at) = self
            .signal_src(to, slot)
            .ok_or(TransportError::NoSuchPeer {
                peer: to,
                count: self.n,
            })?;
        src.store(word, Release);
        Ok((at, self.signal_offset(me, slot)))
    }

    /// Stages query `id` from `me`: where its write to any peer goes, as
    /// for [`SyncRegion::stage_signal`].
    pub(crate) fn stage_query(&self, me: usize, id: u64) -> Option<(usize, u64)> {
        let (src, at) = self.query_src()?;
        src.store(id, Release);
        Some((at, self.query_offset(me)))
    }

    /// Stages `me`'s answer `word` to `to`: where its write goes, as for
    /// [`SyncRegion::stage_signal`].
    pub(crate) fn stage_answer(&self, me: usize, to: usize, word: u64) -> Option<(usize, u64)> {
        let (src, at) = self.answer_src(to)?;
        src.store(word, Release);
        Some((at, self.answer_offset(me)))
    }

    /// Stages `word` as `me`'s abandon to `to` in signal slot `slot` (from
    /// a source word of its own): where its write goes, as for
    /// [`SyncRegion::stage_signal`].
    pub(crate) fn stage_abandon(
        &self,
        me: usize,
        to: usize,
        slot: usize,
        word: u64,
    ) -> Option<(usize, u64)> {
        if to >= self.n || slot >= RING {
            return None;
        }
        let (src, at) = self.src_word(Src::abandon(self.n, to, slot))?;
        src.store(word, Release);
        Some((at, self.signal_offset(me, slot)))
    }

    /// Stages `me`'s abandon reason `word` to `to`: where its write goes, as
    /// for [`SyncRegion::stage_signal`].
    pub(crate) fn stage_reason(&self, me: usize, to: usize, word: u64) -> Option<(usize, u64)> {
        if to >= self.n {
            return None;
        }
        let (src, at) = self.src_word(Src::reason(self.n, to))?;
        src.store(word, Release);
        Some((at, self.reason_offset(me)))
    }

    /// The source word of answers to `to`, and its byte offset in `src`.
    pub(crate) fn answer_src(&self, to: usize) -> Option<(&AtomicU64, usize)> {
        if to >= self.n {
            return None;
        }
        self.src_word(Src::answer(self.n, to))
    }

    /// The source word of queries, and its byte offset in `src`.
    pub(crate) fn query_src(&self) -> Option<(&AtomicU64, usize)> {
        self.src_word(Src::query(self.n))
    }

    fn src_word(&self, i: usize) -> Option<(&AtomicU64, usize)> {
        Self::words(&self.src).get(i).map(|w| (w, 8 * i))
    }

    fn words(buf: &SharedBuffer) -> &[AtomicU64] {
        // Both buffers come from `alloc`, page-aligned: never refused.
        buf.as_atomic_u64s().unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_word_has_its_own_index_within_the_region() {
        for n in 1..8 {
            let mut all: Vec<usize> = (0..n)
                .flat_map(|to| {
                    (0..RING).flat_map(move |s| [Src::signal(n, to, s), Src::abandon(n, to, s)])
                })
                .chain((0..n).flat_map(|to| [Src::answer(n, to), Src::reason(n, to)]))
                .chain([Src::query(n)])
                .collect();
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), Src::words(n), "n = {n}");
            assert_eq!(all.last(), Some(&(Src::words(n) - 1)));
        }
    }
}
