//! [`VerbsRegistrar`]: registrations in a protection domain, for the
//! memory registry (`ibv_reg_mr`), as `UcxRegistrar` is UCX's.

use ferrovia_mr::{MrError, MrRegistry, RegisteredKeys, Registrar};
use ferrovia_types::AccessFlags;
use ferrovia_verbs::{MemoryRegion, ProtectionDomain};

use crate::error::registration;

/// Registers memory in one protection domain.
#[derive(Debug, Clone)]
pub struct VerbsRegistrar {
    pd: ProtectionDomain,
}

impl VerbsRegistrar {
    /// A registrar for `pd`.
    pub fn new(pd: &ProtectionDomain) -> VerbsRegistrar {
        VerbsRegistrar { pd: pd.clone() }
    }

    /// Its protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }
}

/// An empty registry of registrations in `pd`.
pub fn registry(pd: &ProtectionDomain) -> MrRegistry {
    MrRegistry::with_registrar(VerbsRegistrar::new(pd))
}

/// A verbs memory region as the registry's keys (memory windows find
/// the region through [`RegisteredKeys::as_any`]).
pub(crate) struct VerbsKeys(pub(crate) MemoryRegion);

// SAFETY: a verbs MR grants exactly the access it was registered with and
// its keys never change; `ibv_dereg_mr` (the MR's drop) returns only once
// the device has stopped using the region, after which peers' accesses
// with the rkey fail.
unsafe impl RegisteredKeys for VerbsKeys {
    fn lkey(&self) -> u32 {
        self.0.lkey()
    }
    fn rkey(&self) -> u32 {
        self.0.rkey()
    }
    fn access(&self) -> AccessFlags {
        self.0.access()
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

// SAFETY: registers with exactly the asked-for access (the MR's access is
// what `ibv_reg_mr` was given) and never allocates.
unsafe impl Registrar for VerbsRegistrar {
    unsafe fn register(
        &self,
        addr: *mut u8,
        len: usize,
        iova: Option<u64>,
        access: AccessFlags,
    ) -> Result<Box<dyn RegisteredKeys>, MrError> {
        // SAFETY: our caller keeps the memory allocated while the keys
        // live, which is what `MemoryRegion::register{,_iova}` require.
        let mr = unsafe {
            match iova {
                Some(iova) => MemoryRegion::register_iova(&self.pd, addr, len, iova, access),
                None => MemoryRegion::register(&self.pd, addr, len, access),
            }
        }
        .map_err(registration)?;
        Ok(Box::new(VerbsKeys(mr)))
    }

    /// `ibv_reg_dmabuf_mr` in the protection domain: the kernel holds the
    /// dma-buf for the region's life. Soft-RoCE refuses it
    /// (`VerbsError::Unsupported`, inside the registry's error).
    fn register_dmabuf(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Box<dyn RegisteredKeys>, MrError> {
        let mr = MemoryRegion::register_dmabuf(&self.pd, fd, offset, len, iova, access)
            .map_err(registration)?;
        Ok(Box::new(VerbsKeys(mr)))
    }
}
