//! Remote atomics: fetch-and-add and compare-and-swap on an 8-byte
//! aligned `u64` of a peer's memory, with the original value landing in a
//! registered 8-byte local buffer the request borrows.

use ferrovia_mr::RemoteMemoryRegion;
use ferrovia_types::AccessFlags;

use crate::element::Scatter;
use crate::error::{TransportError, TransportResult};

/// What an atomic does to the remote word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// Adds `add` (wrapping) and returns the original value.
    FetchAdd {
        /// The addend.
        add: u64,
    },
    /// Stores `swap` if the word equals `compare`; returns the original
    /// value either way.
    CompareSwap {
        /// The expected value.
        compare: u64,
        /// The value stored if it matched.
        swap: u64,
    },
}

/// A remote atomic on the first 8 bytes of `remote`, whose original value
/// lands in `result`; the completed work hands `result` back, like a read.
///
/// Remote atomics and the owner's CPU atomics on the same word are not
/// atomic with each other on real NICs (the NIC's read-modify-write is
/// not a CPU locked instruction): while peers run atomics on a word, its
/// owner reads it only with an atomic load ([`SharedBuffer::load_u64`](ferrovia_mr::SharedBuffer)),
/// which is correct under that rule, and does not write it.
#[derive(Debug)]
pub struct AtomicWorkRequest<'env> {
    pub(crate) result: Scatter<'env>,
    pub(crate) remote: RemoteMemoryRegion,
    pub(crate) op: AtomicOp,
}

/// An [`AtomicWorkRequest`] addressed to a peer.
#[derive(Debug)]
pub struct PeerAtomicWorkRequest<'env> {
    /// Peer index.
    pub peer: usize,
    /// The request.
    pub wr: AtomicWorkRequest<'env>,
}

impl<'env> PeerAtomicWorkRequest<'env> {
    /// `wr` to `peer`.
    #[inline]
    pub fn new(peer: usize, wr: AtomicWorkRequest<'env>) -> Self {
        PeerAtomicWorkRequest { peer, wr }
    }
}

impl<'env> AtomicWorkRequest<'env> {
    /// Adds `add` to the word at the start of `remote`; its original value
    /// lands in `result` (8 bytes).
    #[inline]
    pub fn fetch_add(
        result: Scatter<'env>,
        remote: RemoteMemoryRegion,
        add: u64,
    ) -> TransportResult<Self> {
        Self::new(result, remote, AtomicOp::FetchAdd { add })
    }

    /// Stores `swap` into the word at the start of `remote` if it equals
    /// `compare`; its original value lands in `result` (8 bytes).
    #[inline]
    pub fn compare_swap(
        result: Scatter<'env>,
        remote: RemoteMemoryRegion,
        compare: u64,
        swap: u64,
    ) -> TransportResult<Self> {
        Self::new(result, remote, AtomicOp::CompareSwap { compare, swap })
    }

    /// Checks what can be checked before posting: an 8-byte result, a
    /// region whose owner allowed atomics, an 8-byte aligned remote word
    /// inside it.
    #[inline]
    pub fn new(
        result: Scatter<'env>,
        remote: RemoteMemoryRegion,
        op: AtomicOp,
    ) -> TransportResult<Self> {
        if result.len() != 8 {
            return Err(TransportError::AtomicResultSize { len: result.len() });
        }
        crate::request::check_right(&remote, AccessFlags::REMOTE_ATOMIC, "a remote atomic")?;
        if !remote.addr().is_multiple_of(8) {
            return Err(TransportError::MisalignedAtomic {
                addr: remote.addr(),
            });
        }
        if remote.len() < 8 {
            return Err(TransportError::RemoteTooSmall {
                local: 8,
                remote: remote.len(),
            });
        }
        Ok(AtomicWorkRequest { result, remote, op })
    }

    /// The operation.
    pub fn op(&self) -> AtomicOp {
        self.op
    }
}
