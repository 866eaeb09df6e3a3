//! The registration backend seam: who turns memory into keys.
//!
//! The registry does the bookkeeping (lookup, reference counts, counters);
//! a [`Registrar`] does the registering: each backend provides one
//! (`VerbsRegistrar` in `ferrovia-verbs-transport`, `UcxRegistrar` in
//! `ferrovia-ucx`). Both traits are `unsafe` to
//! implement: the registry hands out slices of memory a registrar
//! allocated, and decides what the program may do with registered bytes
//! from the rights a registrar reports, so a registrar that lies would
//! let safe code reach freed memory or memory a peer writes.

use std::os::fd::BorrowedFd;
use std::ptr::NonNull;

use ferrovia_types::AccessFlags;

use crate::error::MrError;

/// The keys of one live registration; dropping it deregisters.
///
/// # Safety
/// An implementation promises that:
/// - `access()` is exactly what peers can do with the memory through
///   these keys (never more), and stays so for the keys' life;
/// - `lkey()` and `rkey()` stay constant;
/// - once `drop` returns, no access through these keys, by this process's
///   device or transport or by any peer, touches the memory again (so the
///   registry may free it right after).
pub unsafe trait RegisteredKeys: Send + Sync {
    /// Local key.
    fn lkey(&self) -> u32;
    /// Remote key.
    fn rkey(&self) -> u32;
    /// Access granted.
    fn access(&self) -> AccessFlags;

    /// The backend's own keys, for its extensions to find (verbs: the
    /// memory region a memory window is bound over); `None` (the
    /// default): nothing to find.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// Memory a registrar allocated itself, because its transport reaches
/// such memory faster (UCX: shared memory a peer on the same host maps
/// directly). Dropping it frees the memory.
pub struct Allocation {
    ptr: NonNull<u8>,
    len: usize,
    owner: Box<dyn Send + Sync>,
}

impl Allocation {
    /// An allocation of `len` bytes at `ptr` that dropping `owner` frees.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be page-aligned, zeroed, valid for reads and
    /// writes and used by nothing else until `owner` is dropped; dropping
    /// `owner` (and nothing else) frees it.
    pub unsafe fn new(ptr: NonNull<u8>, len: usize, owner: Box<dyn Send + Sync>) -> Allocation {
        Allocation { ptr, len, owner }
    }

    /// The first byte.
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn into_parts(self) -> (NonNull<u8>, usize, Box<dyn Send + Sync>) {
        (self.ptr, self.len, self.owner)
    }
}

impl std::fmt::Debug for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocation")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// Something that registers memory with a device or transport.
///
/// # Safety
/// An implementation promises that:
/// - `allocate`, when it returns an [`Allocation`], returns one that
///   upholds [`Allocation::new`]'s contract and holds at least `len`
///   bytes;
/// - `register` returns keys that grant exactly `access` (never more; in
///   particular no remote write or atomic access unless asked) and
///   uphold [`RegisteredKeys`]' contract.
pub unsafe trait Registrar: Send + Sync {
    /// Allocates `len` page-aligned, zeroed bytes its registrations reach
    /// faster than ordinary memory, if it has such memory (used by
    /// `MrRegistry::alloc`); `None` (the default): the registry allocates.
    fn allocate(&self, len: usize) -> Option<Result<Allocation, MrError>> {
        let _ = len;
        None
    }

    /// Registers `len` bytes at `addr` with `access`, and with RDMA
    /// address `iova` for the first byte when given.
    ///
    /// # Safety
    /// The memory must stay allocated for as long as the returned keys
    /// exist.
    unsafe fn register(
        &self,
        addr: *mut u8,
        len: usize,
        iova: Option<u64>,
        access: AccessFlags,
    ) -> Result<Box<dyn RegisteredKeys>, MrError>;

    /// Registers `len` bytes of the dma-buf `fd` from byte `offset`, the
    /// first at RDMA address `iova`, with `access`. The keys hold what
    /// they need of the dma-buf (the kernel's reference, or a mapping of
    /// it), so `fd` may be closed once this returns. The default: this
    /// backend does not offer it ([`MrError::NotOffered`]).
    fn register_dmabuf(
        &self,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Box<dyn RegisteredKeys>, MrError> {
        let _ = (fd, offset, len, iova, access);
        Err(MrError::NotOffered {
            what: "dma-buf registration",
        })
    }
}
