//! Preparing a descriptor list, once: every entry checked (its local and
//! remote ranges, its peer), cut into slices, every slice made a piece on
//! every rail (so any rail can carry it, and a lost rail's slices go over
//! another), and the slices of each peer grouped into runs (the unit a
//! rail takes). Submitting the prepared list again costs only the posting.

use std::cell::RefCell;

use ferrovia_channel::{PieceTicket, Pieces};
use ferrovia_mr::Access;
use ferrovia_types::AccessFlags;

use crate::error::TransferError;
use crate::list::DescriptorList;
use crate::segment::{RemoteSegment, Segment};

/// Slices a run holds at most (one doorbell).
pub(crate) const RUN_SLICES: usize = 16;

/// How entries are cut and grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slicing {
    /// Entries longer than this are cut into slices of this many bytes
    /// (default 64 KiB), so several rails can carry one entry.
    pub slice: usize,
    /// A run holds at most this many bytes (default 256 KiB) besides at
    /// most 16 slices: the granule of spreading over rails.
    pub run_bytes: usize,
}

impl Default for Slicing {
    fn default() -> Self {
        Slicing {
            slice: 64 << 10,
            run_bytes: 256 << 10,
        }
    }
}

/// A run of slices of one peer: `first..first + len` of that peer's
/// pieces (the same on every rail).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    pub(crate) peer: u32,
    pub(crate) first: u32,
    pub(crate) len: u32,
    pub(crate) bytes: u64,
    /// Its first slice (a piece tag).
    pub(crate) slice: u32,
}

/// Where a run is, as a batch sees it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunState {
    pub(crate) ticket: Option<PieceTicket>,
    pub(crate) rail: u16,
    pub(crate) done: bool,
    /// When it was posted (ns since the batch's start).
    pub(crate) posted_ns: u64,
}

/// The first entry lacking a remote right, per operation.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Missing {
    pub(crate) write: Option<(usize, usize, AccessFlags)>,
    pub(crate) read: Option<(usize, usize, AccessFlags)>,
}

/// A descriptor list checked and cut for one engine and one segment:
/// submit it with a scope's `submit` or the engine's `submit`, as writes
/// or reads, as often as needed. Its state for one batch at a time lives
/// inside, so submitting allocates nothing.
pub struct PreparedList {
    pub(crate) engine: u64,
    /// Per rail: every slice as a piece, grouped by the rail's peers.
    pub(crate) pieces: Vec<Pieces<'static>>,
    /// Per slice (a piece's tag): its entry.
    pub(crate) slice_entry: Vec<u32>,
    /// Per slice: its run (an index into `runs`).
    pub(crate) slice_run: Vec<u32>,
    pub(crate) runs: Vec<Run>,
    pub(crate) missing: Missing,
    pub(crate) entries: usize,
    pub(crate) bytes: u64,
    /// The peers its entries go to.
    pub(crate) peers: Vec<usize>,
    /// The state of the batch that uses it now.
    pub(crate) state: RefCell<Vec<RunState>>,
    pub(crate) busy: std::cell::Cell<bool>,
}

impl std::fmt::Debug for PreparedList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedList")
            .field("entries", &self.entries)
            .field("slices", &self.slice_entry.len())
            .field("runs", &self.runs.len())
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

/// An empty list (what a batch leaves behind when its list is taken
/// back): no engine takes it.
impl Default for PreparedList {
    fn default() -> Self {
        PreparedList {
            engine: 0,
            pieces: Vec::new(),
            slice_entry: Vec::new(),
            slice_run: Vec::new(),
            runs: Vec::new(),
            missing: Missing::default(),
            entries: 0,
            bytes: 0,
            peers: Vec::new(),
            state: RefCell::default(),
            busy: std::cell::Cell::default(),
        }
    }
}

impl PreparedList {
    /// The pieces of `rail` (to post to the rails' peer `vpeer`).
    pub(crate) fn rail_pieces(
        &self,
        rail: usize,
        vpeer: usize,
    ) -> Result<&Pieces<'static>, ferrovia_channel::TransportError> {
        self.pieces
            .get(rail)
            .ok_or(ferrovia_channel::TransportError::NoSuchPeer {
                peer: vpeer,
                count: self.pieces.len(),
            })
    }

    /// Entries in it.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Slices the entries were cut into.
    pub fn slices(&self) -> usize {
        self.slice_entry.len()
    }

    /// Runs (the unit spread over rails).
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Bytes it moves.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// What preparing needs of its engine.
pub(crate) struct Shape<'e> {
    pub(crate) engine: u64,
    /// The engine's registries, by rail.
    pub(crate) registries: &'e [ferrovia_mr::MrRegistry],
    pub(crate) rails: usize,
    pub(crate) world: usize,
    pub(crate) slicing: Slicing,
}

/// Checks and cuts `list` on `seg` for peers' segments `remotes` (by rank).
pub(crate) fn prepare<A: Access>(
    shape: &Shape<'_>,
    seg: &Segment<A>,
    list: &DescriptorList,
    remotes: &[RemoteSegment],
) -> Result<PreparedList, TransferError> {
    if list.is_empty() {
        return Err(TransferError::EmptyList);
    }
    let (rails, n) = (shape.rails, shape.world);
    if seg.rails() != rails {
        return Err(TransferError::Mismatch(format!(
            "a segment of {} rails for an engine of {rails}",
            seg.rails()
        )));
    }
    let mut pieces: Vec<Pieces<'static>> = (0..rails)
        .map(|r| {
            let reg = seg
                .registration(r)
                .ok_or_else(|| TransferError::Mismatch("a rail without a registration".into()))?;
            // Another engine's keys would fail on this one's rails, and
            // on verbs take the connection down with them.
            if !reg.belongs_to(&shape.registries[r]) {
                return Err(TransferError::Mismatch(format!(
                    "the segment's rail {r} registration is another engine's"
                )));
            }
            Ok(Pieces::new(reg, rails * n))
        })
        .collect::<Result<_, _>>()?;
    let mut missing = Missing::default();
    let mut bytes = 0u64;
    // Slices by peer, in entry order: (entry, local range, remote offset).
    let mut by_peer: Vec<Vec<(u32, usize, usize, u64)>> = vec![Vec::new(); n];
    for (i, e) in list.entries().iter().enumerate() {
        if e.local.is_empty() {
            return Err(TransferError::EmptyEntry { entry: i });
        }
        if e.local.end > seg.len() {
            return Err(TransferError::LocalOutOfRange {
                entry: i,
                start: e.local.start,
                end: e.local.end,
                len: seg.len(),
            });
        }
        let Some(remote) = remotes.get(e.peer).filter(|_| e.peer < n) else {
            return Err(TransferError::UnknownPeer {
                entry: i,
                peer: e.peer,
                world: n,
                given: remotes.len(),
            });
        };
        if remote.rails() != rails {
            return Err(TransferError::Mismatch(format!(
                "peer {}'s segment has {} rails, this engine {rails}",
                e.peer,
                remote.rails()
            )));
        }
        let len = e.local.len() as u64;
        if e.remote_offset
            .checked_add(len)
            .is_none_or(|end| end > remote.len())
        {
            return Err(TransferError::RemoteOutOfRange {
                entry: i,
                peer: e.peer,
                offset: e.remote_offset,
                len,
                size: remote.len(),
            });
        }
        let granted = remote.access();
        if missing.write.is_none() && !granted.contains(AccessFlags::REMOTE_WRITE) {
            missing.write = Some((i, e.peer, granted));
        }
        if missing.read.is_none() && !granted.contains(AccessFlags::REMOTE_READ) {
            missing.read = Some((i, e.peer, granted));
        }
        bytes += len;
        let mut at = e.local.start;
        while at < e.local.end {
            let end = (at + shape.slicing.slice.max(1)).min(e.local.end);
            let off = e.remote_offset + (at - e.local.start) as u64;
            by_peer[e.peer].push((i as u32, at, end, off));
            at = end;
        }
    }
    let mut slice_entry = Vec::new();
    let mut runs = Vec::new();
    let mut peers = Vec::new();
    for (peer, slices) in by_peer.iter().enumerate() {
        if slices.is_empty() {
            continue;
        }
        peers.push(peer);
        let remote = &remotes[peer];
        let mut run: Option<Run> = None;
        for (k, &(entry, start, end, off)) in slices.iter().enumerate() {
            let tag = slice_entry.len() as u32;
            slice_entry.push(entry);
            for (r, p) in pieces.iter_mut().enumerate() {
                let region = remote
                    .rail(r)
                    .ok_or_else(|| TransferError::Mismatch("a rail without a descriptor".into()))?
                    .sub_region(off, (end - start) as u64)?;
                p.push(r * n + peer, start..end, region, tag)?;
            }
            let len = (end - start) as u64;
            match &mut run {
                Some(cur)
                    if (cur.len as usize) < RUN_SLICES
                        && cur.bytes + len <= shape.slicing.run_bytes as u64 =>
                {
                    cur.len += 1;
                    cur.bytes += len;
                }
                _ => {
                    if let Some(done) = run.take() {
                        runs.push(done);
                    }
                    run = Some(Run {
                        peer: peer as u32,
                        first: k as u32,
                        len: 1,
                        bytes: len,
                        slice: tag,
                    });
                }
            }
        }
        if let Some(done) = run {
            runs.push(done);
        }
    }
    // Peers take turns, so a batch to many peers keeps them all busy.
    interleave(&mut runs, n);
    // A run's slices are consecutive tags.
    let mut slice_run = vec![0u32; slice_entry.len()];
    for (i, run) in runs.iter().enumerate() {
        slice_run[run.slice as usize..(run.slice + run.len) as usize].fill(i as u32);
    }
    Ok(PreparedList {
        engine: shape.engine,
        pieces,
        slice_entry,
        slice_run,
        state: RefCell::new(vec![RunState::default(); runs.len()]),
        runs,
        missing,
        entries: list.len(),
        bytes,
        peers,
        busy: std::cell::Cell::new(false),
    })
}

/// Reorders `runs` (grouped by peer, in order) so peers alternate, each
/// peer's runs keeping their order.
fn interleave(runs: &mut Vec<Run>, peers: usize) {
    let mut queues: Vec<std::collections::VecDeque<Run>> = vec![Default::default(); peers];
    for r in runs.drain(..) {
        queues[r.peer as usize].push_back(r);
    }
    loop {
        let mut any = false;
        for q in &mut queues {
            if let Some(r) = q.pop_front() {
                runs.push(r);
                any = true;
            }
        }
        if !any {
            break;
        }
    }
}
