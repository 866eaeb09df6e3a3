//! One-sided work checked once and posted many times: [`Pieces`], each a
//! range of one local registration and the remote range it goes to (a
//! write) or comes from (a read), and the [`Lease`] that proves nothing
//! else touches the local bytes while the device does. What a transfer
//! layer posts: a prepared list of thousands of pieces costs only the
//! posting when it is submitted again (see `post_pieces`).

use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use ferrovia_mr::{
    Access, Local, RegisteredBuffer, RegisteredMemory, Registration, RemoteMemoryRegion, Shared,
};
use ferrovia_types::{AccessFlags, CompletionError, Sge};

use crate::element::sge_of;
use crate::error::{TransportError, TransportResult};

/// One piece: what its op needs, 32 bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PieceOp {
    pub(crate) sge: Sge,
    pub(crate) remote_addr: u64,
    pub(crate) rkey: u32,
    /// The caller's name for it (an entry or slice index), reported with
    /// its error.
    pub(crate) tag: u32,
}

/// Pieces of one-sided work on one local registration, grouped by peer:
/// checked when pushed (the local range inside the registration, the
/// remote range of the same length), posted by
/// [`PollingScope::post_pieces`](crate::PollingScope::post_pieces) or
/// [`ChannelCore::post_pieces_owned`](crate::engine::ChannelCore::post_pieces_owned)
/// as writes or reads, under a [`Lease`] of the local bytes.
///
/// The registration (its keys) stays alive with the pieces. The remote
/// rights a peer's pieces all have are kept, so a post of writes to a
/// peer whose regions do not all grant remote write is refused before
/// anything is posted.
pub struct Pieces<'a> {
    reg: Registration<'a>,
    /// Per peer: its pieces, in the order pushed.
    by_peer: Vec<Vec<PieceOp>>,
    /// Per peer: the remote rights every one of its pieces has.
    rights: Vec<AccessFlags>,
    /// The virtual addresses the pieces reach, to check against a lease.
    span: Option<(usize, usize)>,
}

impl std::fmt::Debug for Pieces<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pieces")
            .field("peers", &self.by_peer.len())
            .field("pieces", &self.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Pieces<'a> {
    /// No pieces yet, on `reg` (the registration, in the channel's
    /// protection domain or registrar, whose keys the local side uses),
    /// for `peers` peers.
    pub fn new(reg: &Registration<'a>, peers: usize) -> Pieces<'a> {
        Pieces {
            reg: reg.clone(),
            by_peer: vec![Vec::new(); peers],
            rights: vec![AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE; peers],
            span: None,
        }
    }

    /// Adds a piece for `peer`: `local` (offsets in the registration, not
    /// empty) and `remote`, at least as long (the piece reaches its first
    /// `local.len()` bytes). `tag` names it in its error. Returns its index
    /// among `peer`'s pieces.
    pub fn push(
        &mut self,
        peer: usize,
        local: Range<usize>,
        remote: RemoteMemoryRegion,
        tag: u32,
    ) -> TransportResult<usize> {
        let count = self.by_peer.len();
        if peer >= count {
            return Err(TransportError::NoSuchPeer { peer, count });
        }
        if local.is_empty() {
            return Err(TransportError::EmptyList);
        }
        if remote.len() < local.len() as u64 {
            return Err(TransportError::RemoteTooSmall {
                local: local.len() as u64,
                remote: remote.len(),
            });
        }
        let view = self.reg.view_at(local.start, local.len())?;
        let op = PieceOp {
            sge: sge_of(view)?,
            remote_addr: remote.addr(),
            rkey: remote.rkey(),
            tag,
        };
        let (start, end) = (view.virtual_addr, view.virtual_addr + view.size);
        self.span = Some(match self.span {
            None => (start, end),
            Some((s, e)) => (s.min(start), e.max(end)),
        });
        self.rights[peer] =
            AccessFlags::from_bits(self.rights[peer].bits() & remote.access().bits());
        let ops = &mut self.by_peer[peer];
        ops.push(op);
        Ok(ops.len() - 1)
    }

    /// Pieces in all.
    pub fn len(&self) -> usize {
        self.by_peer.iter().map(Vec::len).sum()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `peer`'s pieces.
    pub fn peer_len(&self, peer: usize) -> usize {
        self.by_peer.get(peer).map_or(0, Vec::len)
    }

    /// Peers the pieces are grouped by.
    pub fn peers(&self) -> usize {
        self.by_peer.len()
    }

    /// The registration the pieces use.
    pub(crate) fn registration(&self) -> &Registration<'a> {
        &self.reg
    }

    /// The pieces `range` of `peer`, checked to lie under `lease`, with
    /// the rights `write` or read needs: what posting takes.
    pub(crate) fn run(
        &self,
        peer: usize,
        range: Range<usize>,
        write: bool,
        lease: &Lease<'_>,
    ) -> TransportResult<&[PieceOp]> {
        let count = self.by_peer.len();
        let ops = self
            .by_peer
            .get(peer)
            .ok_or(TransportError::NoSuchPeer { peer, count })?;
        let run = ops
            .get(range.clone())
            .filter(|r| !r.is_empty())
            .ok_or_else(|| {
                TransportError::Config(format!(
                    "pieces {range:?} of peer {peer}: it has {} (and a run is never empty)",
                    ops.len()
                ))
            })?;
        if !write && !lease.writable {
            return Err(TransportError::Config(
                "a read needs a lease that may write the local bytes (exclusive or owning)".into(),
            ));
        }
        let (needed, op) = if write {
            (AccessFlags::REMOTE_WRITE, "an RDMA write")
        } else {
            (AccessFlags::REMOTE_READ, "an RDMA read")
        };
        if !self.rights[peer].contains(needed) {
            return Err(TransportError::RemoteAccessDenied {
                op,
                granted: self.rights[peer],
            });
        }
        if !self.covered_by(lease) {
            return Err(TransportError::Config(
                "the pieces reach bytes outside the lease".into(),
            ));
        }
        Ok(run)
    }
}

impl Pieces<'_> {
    /// Whether `lease` lends every byte the pieces reach (what posting
    /// them under it needs).
    pub fn covered_by(&self, lease: &Lease<'_>) -> bool {
        self.span
            .is_some_and(|(s, e)| lease.start <= s && e <= lease.end)
    }
}

/// The local bytes pieces work on, for `'env`, and what proves that no
/// Rust reference touches them while the device does: an exclusive borrow
/// (reads and writes), a shared borrow (writes only: the device only reads
/// the bytes), or ownership (reads and writes; the bytes come back with
/// [`Lease::into_buffer`] once no batch holds the lease).
pub struct Lease<'env> {
    start: usize,
    end: usize,
    /// The device may write the bytes (reads): nobody else holds them.
    writable: bool,
    owned: Option<RegisteredBuffer>,
    /// Other registrations of the owned bytes (aliases on other rails)
    /// that owned runs need alive.
    keys: Vec<Registration<'static>>,
    _borrow: PhantomData<&'env mut [u8]>,
}

impl std::fmt::Debug for Lease<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("len", &(self.end - self.start))
            .field("writable", &self.writable)
            .field("owned", &self.owned.is_some())
            .finish()
    }
}

impl<'env> Lease<'env> {
    /// Reads into and writes from `mem`, exclusively borrowed for `'env`.
    pub fn exclusive(mem: &'env mut RegisteredMemory<'_, Local>) -> Lease<'env> {
        let start = mem.addr();
        Lease {
            start,
            end: start + mem.len(),
            writable: true,
            owned: None,
            keys: Vec::new(),
            _borrow: PhantomData,
        }
    }

    /// Writes from `mem` (the device reads it as it finds it; `Shared`
    /// memory may change meanwhile by peers' writes or atomic stores),
    /// shared for `'env`. Reads into it are refused.
    pub fn shared<A: Access>(mem: &'env RegisteredMemory<'_, A>) -> Lease<'env> {
        let start = mem.addr();
        Lease {
            start,
            end: start + mem.len(),
            writable: false,
            owned: None,
            keys: Vec::new(),
            _borrow: PhantomData,
        }
    }

    /// Reads into and writes from `Shared` memory, shared for `'env`.
    /// Nothing holds a Rust reference to `Shared` bytes (they are read and
    /// written through copies and atomics, as peers write them anyway),
    /// so the device may write them while the program looks.
    pub fn shared_memory(mem: &'env RegisteredMemory<'_, Shared>) -> Lease<'env> {
        Lease {
            writable: true,
            ..Lease::shared(mem)
        }
    }

    /// Whether reads into the bytes are allowed.
    pub fn writable(&self) -> bool {
        self.writable
    }
}

impl Lease<'static> {
    /// Owns `buf` (reads and writes): put it in an `Arc` and post owned
    /// pieces under it; every posted run holds the `Arc` until the device
    /// is done with it.
    pub fn owning(buf: RegisteredBuffer) -> Lease<'static> {
        Self::owning_with(buf, Vec::new())
    }

    /// Owns `buf` and keeps `keys`, other registrations of its bytes
    /// (aliases on other rails), alive with it: owned pieces may be posted
    /// under it only on a registration it keeps alive (the buffer's own,
    /// or one of `keys`), so no key is deregistered while its run is out.
    pub fn owning_with(buf: RegisteredBuffer, keys: Vec<Registration<'static>>) -> Lease<'static> {
        let start = buf.addr();
        Lease {
            start,
            end: start + buf.len(),
            writable: true,
            owned: Some(buf),
            keys,
            _borrow: PhantomData,
        }
    }

    /// Whether the lease keeps `reg` alive.
    pub(crate) fn keeps(&self, reg: &Registration<'_>) -> bool {
        self.owned
            .as_ref()
            .is_some_and(|b| b.registration().is_same(reg))
            || self.keys.iter().any(|k| k.is_same(reg))
    }

    /// The owned buffer back (`None` for a borrowing lease).
    pub fn into_buffer(self) -> Option<RegisteredBuffer> {
        self.owned
    }

    /// The owned buffer and the registrations kept with it
    /// ([`Lease::owning_with`]); a borrowing lease comes back as it is.
    #[allow(clippy::type_complexity)]
    pub fn into_parts(
        mut self,
    ) -> Result<(RegisteredBuffer, Vec<Registration<'static>>), Lease<'static>> {
        match self.owned.take() {
            Some(b) => Ok((b, std::mem::take(&mut self.keys))),
            None => Err(self),
        }
    }

    /// Whether it owns its bytes.
    pub fn owns(&self) -> bool {
        self.owned.is_some()
    }

    /// The owned buffer back, once nothing else holds the lease (no run
    /// posted under it is outstanding); else the `Arc` again.
    pub fn try_unwrap(
        lease: Arc<Lease<'static>>,
    ) -> Result<Option<RegisteredBuffer>, Arc<Lease<'static>>> {
        Arc::try_unwrap(lease).map(Lease::into_buffer)
    }
}

/// A posted run of pieces, to ask about with
/// [`ChannelCore::poll_piece`](crate::engine::ChannelCore::poll_piece): an id, not
/// a borrow (a stale one is simply gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PieceTicket {
    pub(crate) index: u32,
    pub(crate) epoch: u32,
    pub(crate) run: u64,
}

impl PieceTicket {
    /// The run's id on its core (unique per core; what its pieces'
    /// [`PieceError::run`] say).
    pub fn run(&self) -> u64 {
        self.run
    }
}

/// What a run's ticket finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceState {
    /// Not complete yet.
    Pending,
    /// Every piece of the run completed (the ticket is used up).
    Done,
    /// The run's last piece completed with an error (an earlier piece's
    /// error, if any, is in
    /// [`ChannelCore::take_piece_errors`](crate::engine::ChannelCore::take_piece_errors));
    /// the ticket is used up.
    Failed(CompletionError),
    /// No such run (already taken, or never posted here).
    Gone,
}

/// A piece that failed before the last of its run, with its tag and its
/// run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PieceError {
    /// The tag it was pushed with.
    pub tag: u32,
    /// The id of the run it was part of ([`PieceTicket::run`]): errors of
    /// a run given up on can come after a later run of the same pieces
    /// was posted.
    pub run: u64,
    /// Its completion's error.
    pub error: CompletionError,
}
