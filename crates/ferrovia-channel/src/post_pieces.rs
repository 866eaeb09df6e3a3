//! Posting runs of [`Pieces`](crate::Pieces): the ops of a prepared list,
//! built by copying a checked piece and setting its `wr_id`, one doorbell
//! per 16, only the last of each 16 signalled. A run gets one ticket (its
//! last piece's slot); the other pieces free their slots as they complete,
//! and an error of one of them goes, with its tag, to the piece errors.
//! Nothing here allocates.

use std::ops::Range;
use std::sync::Arc;

use crate::core::ChannelCore;
use crate::error::{TransportError, TransportResult};
use crate::op::CHUNK;
use crate::op::{OpKind, SendOp};
use crate::pieces::{Lease, PieceError, PieceOp, PieceState, PieceTicket, Pieces};
use crate::scope::{PollingScope, ScopeTarget};
use crate::slots::{Queue, error_of, wr_id};

/// Writes `op` over `out` for posting with `wr_id`.
#[inline(always)]
fn fill(out: &mut SendOp, op: &PieceOp, kind: OpKind, wr_id: u64, signaled: bool) {
    out.wr_id = wr_id;
    out.kind = kind;
    out.sges[0] = op.sge;
    out.num_sge = 1;
    out.remote_addr = op.remote_addr;
    out.rkey = op.rkey;
    out.imm = None;
    out.compare_add = 0;
    out.swap = 0;
    out.signaled = signaled;
    out.inline = false;
}

impl ChannelCore {
    /// Posts `run` to `peer` as `kind` (a write or a read); `keep`, for
    /// owned pieces, is held by the last piece of every 16 until the
    /// device is done with them. The run's ticket.
    fn post_run(
        &self,
        peer: usize,
        kind: OpKind,
        run: &[PieceOp],
        keep: Option<&Arc<Lease<'static>>>,
    ) -> TransportResult<PieceTicket> {
        let depth = self.send_depth.get(peer).copied().unwrap_or(1).max(1);
        let chunk_len = CHUNK.min(depth as usize);
        let mut tail = PieceTicket {
            index: 0,
            epoch: 0,
            run: 0,
        };
        let mut run_id = 0;
        let mut posted = 0;
        for chunk in run.chunks(chunk_len) {
            let mut guard = self.reserve(peer, Queue::Send, chunk.len() as u32)?;
            let st = &mut *guard;
            if st.slots.tags.is_empty() {
                let cap = st.slots.meta.len();
                st.slots.tags.resize(cap, (u32::MAX, 0));
            }
            if run_id == 0 {
                // Its id, so a piece's error names the run it was part of
                // (a ticket given up on leaves errors a later run of the
                // same pieces must not take for its own).
                st.slots.last_run += 1;
                run_id = st.slots.last_run;
            }
            if keep.is_some() {
                let cap = st.slots.meta.len();
                st.slots.owned.ensure(cap);
            }
            let last_chunk = posted + chunk.len() == run.len();
            for (i, (piece, op)) in chunk.iter().zip(st.ops.iter_mut()).enumerate() {
                let is_tail = last_chunk && i + 1 == chunk.len();
                let signaled = i + 1 == chunk.len();
                // Reserved above: a slot is free.
                let (index, epoch) = st.slots.alloc(peer, Queue::Send, &[], !is_tail);
                let m = &mut st.slots.meta[index as usize];
                m.piece = true;
                if signaled && let Some(lease) = keep {
                    m.owned = true;
                    st.slots.owned.keep(index, lease);
                }
                st.slots.tags[index as usize] = (piece.tag, run_id);
                fill(op, piece, kind, wr_id(index, epoch), signaled);
                if is_tail {
                    tail = PieceTicket {
                        index,
                        epoch,
                        run: run_id,
                    };
                }
            }
            posted += chunk.len();
            // SAFETY: each op's SGE lies in the bytes of the lease the
            // caller holds (`Pieces::run` checked its span) and names the
            // registration the pieces keep alive. For a scope's run
            // (`keep: None`) the lease borrows the bytes for the scope's
            // 'env (exclusively for a read, shared for a write: nothing
            // else writes them), and the scope drains every op of this
            // core before 'env ends (see `post_send`). For an owned run the
            // lease owns the bytes, and the last piece of every chunk holds
            // it in its slot until the transport reports that piece, which
            // comes after the chunk's earlier, unsignalled pieces; the slot
            // hands it on only then (`Slots::release`), or leaks it if the
            // engine drops with the flush never reported.
            unsafe { self.post_staged(st, peer, chunk.len()) }?;
        }
        self.wake_routed();
        Ok(tail)
    }

    /// Posts pieces `range` of `peer` (of `pieces`) as writes or reads
    /// whose local bytes the owned `lease` holds, with the pieces'
    /// registration (so their keys outlive the run); the run's ticket. Nothing
    /// blocks but for queue room ([`ChannelCore::send_room`] says how
    /// much there is), and dropping or forgetting the ticket frees nothing
    /// the device may touch: the run holds the lease until it is done.
    pub fn post_pieces_owned(
        &self,
        pieces: &Pieces<'_>,
        peer: usize,
        range: Range<usize>,
        kind: OpKind,
        lease: &Arc<Lease<'static>>,
    ) -> TransportResult<PieceTicket> {
        if !lease.keeps(pieces.registration()) {
            return Err(TransportError::Config(
                "owned pieces need a lease that keeps their registration alive (Lease::owning_with)"
                    .into(),
            ));
        }
        let run = pieces.run(peer, range, one_sided(kind)?, lease)?;
        self.post_run(peer, kind, run, Some(lease))
    }

    /// How many more send-queue requests `peer` takes now.
    pub fn send_room(&self, peer: usize) -> u32 {
        let Some(&depth) = self.send_depth.get(peer) else {
            return 0;
        };
        let st = self.state();
        let used = st.slots.outstanding_send[peer];
        depth.saturating_sub(used).min(st.slots.free_count() as u32)
    }

    /// Whether the run of `ticket` completed; a completed (or failed) run's
    /// ticket is used up. Does not poll the transport: see
    /// [`ChannelCore::progress`].
    pub fn poll_piece(&self, ticket: PieceTicket) -> PieceState {
        let taken = self.state().slots.take_done(ticket.index, ticket.epoch);
        match taken {
            None => PieceState::Gone,
            Some(None) => PieceState::Pending,
            Some(Some(c)) if c.status.is_success() => PieceState::Done,
            Some(Some(c)) => PieceState::Failed(error_of(&c)),
        }
    }

    /// Gives up on a run's ticket: its slot is freed when it completes (an
    /// owned run's lease is handed on then), and its error, if any, goes
    /// to the piece errors.
    pub fn abandon_piece(&self, ticket: PieceTicket) {
        let mut st = self.state();
        let tag = st.slots.tags.get(ticket.index as usize).map(|t| t.0);
        if let Some(Some(c)) = st.slots.take_done(ticket.index, ticket.epoch) {
            if !c.status.is_success() {
                st.slots.piece_errors.push(PieceError {
                    tag: tag.unwrap_or(u32::MAX),
                    run: ticket.run,
                    error: error_of(&c),
                });
            }
        } else {
            st.slots.detach_quietly(ticket.index, ticket.epoch);
        }
    }

    /// Moves the errors of pieces that failed before the last of their run
    /// (oldest first) to `out`; how many were dropped past the bound of
    /// 1024 kept since the last call.
    pub fn take_piece_errors(&self, out: &mut Vec<PieceError>) -> u64 {
        let mut st = self.state();
        out.append(&mut st.slots.piece_errors);
        std::mem::take(&mut st.slots.piece_errors_dropped)
    }
}

/// Whether `kind` is a write (true) or a read (false); others refused.
fn one_sided(kind: OpKind) -> TransportResult<bool> {
    match kind {
        OpKind::Write => Ok(true),
        OpKind::Read => Ok(false),
        other => Err(TransportError::Config(format!(
            "pieces are written or read, not posted as {other:?}"
        ))),
    }
}

impl<'env, C: ScopeTarget> PollingScope<'_, 'env, C> {
    /// Posts pieces `range` of `peer` (of `pieces`, borrowed for `'env` so
    /// their keys outlive the run) as writes or reads of the bytes `lease`
    /// borrows for the scope's `'env`; the run's ticket
    /// ([`ChannelCore::poll_piece`], through
    /// [`PollingScope::target`]'s core). The scope drains the run before
    /// it returns, like any of its requests; a ticket not taken by then is
    /// given up (give it up with [`ChannelCore::abandon_piece`] to free its
    /// slot earlier).
    pub fn post_pieces(
        &mut self,
        pieces: &'env Pieces<'_>,
        peer: usize,
        range: Range<usize>,
        kind: OpKind,
        lease: &'env Lease<'env>,
    ) -> TransportResult<PieceTicket> {
        let core = self.core();
        let run = pieces.run(peer, range, one_sided(kind)?, lease)?;
        core.post_run(peer, kind, run, None)
    }
}
