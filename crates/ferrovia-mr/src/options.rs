//! How a segment is registered: access rights and RDMA addressing.

use std::marker::PhantomData;

use ferrovia_types::AccessFlags;

use crate::access::{Access, Local, Shared};
use crate::error::MrError;

/// Options of a registration; `A` says how the program may touch the
/// bytes ([`Local`] or [`Shared`], see the crate docs).
///
/// The default is local-only: the NIC may read the memory and write it for
/// receives and read responses the program posts, but no peer can touch
/// it. Remote read is an opt-in that keeps the memory [`Local`]; remote
/// write and remote atomics are opt-ins that make it [`Shared`], because
/// anyone holding the rkey can then change it without the owner's
/// involvement:
///
/// ```
/// use ferrovia_mr::{Local, RegisterOptions, Shared};
///
/// let readable: RegisterOptions<Local> = RegisterOptions::local().allow_remote_read();
/// let writable: RegisterOptions<Shared> = RegisterOptions::local().allow_remote_write();
/// # let _ = (readable, writable);
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct RegisterOptions<A: Access = Local> {
    pub(crate) access: AccessFlags,
    pub(crate) addressing: Addressing,
    _access: PhantomData<A>,
}

impl<A: Access> Clone for RegisterOptions<A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A: Access> Copy for RegisterOptions<A> {}

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

impl Default for RegisterOptions<Local> {
    fn default() -> Self {
        Self::local()
    }
}

impl RegisterOptions<Local> {
    /// Local access only (`LOCAL_WRITE`).
    pub fn local() -> Self {
        RegisterOptions {
            access: AccessFlags::LOCAL_WRITE,
            addressing: Addressing::Virtual,
            _access: PhantomData,
        }
    }

    /// The bytes are [`Shared`] without granting peers anything: for
    /// memory the program updates with atomic stores while work that
    /// reads it may be posted (a flag, a counter it sends).
    pub fn shared(self) -> RegisterOptions<Shared> {
        self.with_access(self.access)
    }
}

impl<A: Access> RegisterOptions<A> {
    fn with_access<B: Access>(self, access: AccessFlags) -> RegisterOptions<B> {
        RegisterOptions {
            access,
            addressing: self.addressing,
            _access: PhantomData,
        }
    }

    /// Lets peers RDMA-read the memory (it stays as it was, [`Local`] or
    /// [`Shared`]: reads do not change it).
    pub fn allow_remote_read(mut self) -> Self {
        self.access |= AccessFlags::REMOTE_READ;
        self
    }

    /// Lets peers RDMA-write the memory: it becomes [`Shared`].
    pub fn allow_remote_write(self) -> RegisterOptions<Shared> {
        self.with_access(self.access | AccessFlags::REMOTE_WRITE)
    }

    /// Lets peers run atomics on the memory: it becomes [`Shared`].
    pub fn allow_remote_atomic(self) -> RegisterOptions<Shared> {
        self.with_access(self.access | AccessFlags::REMOTE_ATOMIC)
    }

    /// Lets memory windows be bound over the memory (verbs:
    /// `IBV_ACCESS_MW_BIND`). It stays [`Local`] or [`Shared`] as it was:
    /// a window grants a peer at most the remote rights these options
    /// grant themselves, checked when it is bound.
    pub fn allow_memory_windows(mut self) -> Self {
        self.access |= AccessFlags::MW_BIND;
        self
    }

    /// Registers on demand (verbs: `IBV_ACCESS_ON_DEMAND`): the device
    /// maps pages when it first touches them instead of pinning them all
    /// now (large or sparse memory). A device without on-demand paging
    /// refuses it with a typed error naming the capability, before
    /// registering anything; where it is offered, prefetching warms a
    /// range first (`ferrovia-verbs`' `MemoryRegion::prefetch`).
    pub fn on_demand(mut self) -> Self {
        self.access |= AccessFlags::ON_DEMAND;
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
        let page = ferrovia_types::page_size() as u64;
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

    /// The RDMA addressing these options ask for.
    pub fn addressing(&self) -> Addressing {
        self.addressing
    }
}
