//! How a segment is registered: access rights and RDMA addressing.

use ferrovia_verbs::AccessFlags;

use crate::error::MrError;

/// Options of a registration.
///
/// The default is local-only: the NIC may read the memory and write it for
/// receives and read responses, but no peer can touch it. Remote read,
/// write and atomics are explicit opt-ins, because anyone holding the rkey
/// can then access the memory without the owner's involvement; memory a
/// peer may write should be read only after the peer says it is done (a
/// message, an immediate, a barrier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisterOptions {
    pub(crate) access: AccessFlags,
    pub(crate) addressing: Addressing,
}

/// Which RDMA address the first registered byte gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressing {
    /// Its virtual address (plain `ibv_reg_mr`).
    Virtual,
    /// Zero-based: the page holding the first byte starts at RDMA address
    /// 0, so a page-aligned segment's byte `i` has RDMA address `i`.
    ZeroBased,
    /// This RDMA address; it must share the first byte's offset within a
    /// page (a kernel rule), else registration fails with a typed error.
    Base(u64),
}

impl Default for RegisterOptions {
    fn default() -> Self {
        Self::local()
    }
}

impl RegisterOptions {
    /// Local access only (`LOCAL_WRITE`).
    pub fn local() -> Self {
        RegisterOptions {
            access: AccessFlags::LOCAL_WRITE,
            addressing: Addressing::Virtual,
        }
    }

    /// Lets peers RDMA-read the memory.
    pub fn allow_remote_read(mut self) -> Self {
        self.access |= AccessFlags::REMOTE_READ;
        self
    }

    /// Lets peers RDMA-write the memory.
    pub fn allow_remote_write(mut self) -> Self {
        self.access |= AccessFlags::REMOTE_WRITE;
        self
    }

    /// Lets peers run atomics on the memory.
    pub fn allow_remote_atomic(mut self) -> Self {
        self.access |= AccessFlags::REMOTE_ATOMIC;
        self
    }

    /// Registers zero-based (`ibv_reg_mr_iova`), as caching allocators
    /// do: byte `i` of a page-aligned segment has RDMA address `i`. (A
    /// segment starting mid-page keeps its offset in the page; use
    /// [`MrRegistry::alloc`](crate::MrRegistry::alloc) for aligned memory.)
    pub fn zero_based(mut self) -> Self {
        self.addressing = Addressing::ZeroBased;
        self
    }

    /// Registers with RDMA address `iova` for the first byte.
    pub fn rdma_base(mut self, iova: u64) -> Self {
        self.addressing = Addressing::Base(iova);
        self
    }

    /// The RDMA address of a segment starting at `addr`, or the error if
    /// the kernel would refuse it.
    pub(crate) fn resolve_iova(&self, addr: usize) -> Result<Option<u64>, MrError> {
        let page = ferrovia_verbs::page_size() as u64;
        let in_page = addr as u64 % page;
        match self.addressing {
            Addressing::Virtual => Ok(None),
            Addressing::ZeroBased => Ok(Some(in_page)),
            Addressing::Base(iova) if iova % page == in_page => Ok(Some(iova)),
            Addressing::Base(iova) => Err(MrError::MisalignedRdmaBase { addr, iova, page }),
        }
    }

    /// The access rights these options grant.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
}
