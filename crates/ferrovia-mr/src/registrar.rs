//! The registration backend seam: who turns memory into keys.
//!
//! The registry does the bookkeeping (lookup, reference counts, counters);
//! a [`Registrar`] does the registering. Verbs protection domains are one;
//! the UCX transport provides another.

use ferrovia_verbs::{AccessFlags, MemoryRegion, ProtectionDomain};

use crate::error::MrError;
use crate::options::RegisterOptions;

/// The keys of one live registration; dropping it deregisters.
pub trait RegisteredKeys: Send + Sync {
    /// Local key.
    fn lkey(&self) -> u32;
    /// Remote key.
    fn rkey(&self) -> u32;
    /// Access granted.
    fn access(&self) -> AccessFlags;
}

/// Memory a registrar allocated itself, because its transport reaches
/// such memory faster (UCX: shared memory a peer on the same host maps
/// directly). Dropping `owner` frees it.
pub struct Allocation {
    /// The first byte (page-aligned, `len` zeroed bytes).
    pub ptr: std::ptr::NonNull<u8>,
    /// Its length.
    pub len: usize,
    /// Frees the memory when dropped (after every registration of it).
    pub owner: Box<dyn Send + Sync>,
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
pub trait Registrar: Send + Sync {
    /// Allocates `len` page-aligned, zeroed bytes its registrations reach
    /// faster than ordinary memory, if it has such memory (used by
    /// `MrRegistry::alloc`); `None` (the default): the registry allocates.
    fn allocate(&self, len: usize) -> Option<Result<Allocation, MrError>> {
        let _ = len;
        None
    }

    /// Registers `len` bytes at `addr` with `opts`' access, and with
    /// RDMA address `iova` for the first byte when given.
    ///
    /// # Safety
    /// The memory must stay allocated for as long as the returned keys
    /// exist.
    unsafe fn register(
        &self,
        addr: *mut u8,
        len: usize,
        iova: Option<u64>,
        opts: &RegisterOptions,
    ) -> Result<Box<dyn RegisteredKeys>, MrError>;
}

impl RegisteredKeys for MemoryRegion {
    fn lkey(&self) -> u32 {
        MemoryRegion::lkey(self)
    }
    fn rkey(&self) -> u32 {
        MemoryRegion::rkey(self)
    }
    fn access(&self) -> AccessFlags {
        MemoryRegion::access(self)
    }
}

impl Registrar for ProtectionDomain {
    unsafe fn register(
        &self,
        addr: *mut u8,
        len: usize,
        iova: Option<u64>,
        opts: &RegisterOptions,
    ) -> Result<Box<dyn RegisteredKeys>, MrError> {
        // SAFETY: forwarded to the caller's contract.
        let mr = unsafe {
            match iova {
                Some(iova) => MemoryRegion::register_iova(self, addr, len, iova, opts.access)?,
                None => MemoryRegion::register(self, addr, len, opts.access)?,
            }
        };
        Ok(Box::new(mr))
    }
}
