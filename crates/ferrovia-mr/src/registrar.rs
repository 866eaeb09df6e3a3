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

/// Something that registers memory with a device or transport.
pub trait Registrar: Send + Sync {
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
