//! dma-buf registrations over UCX. UCX 1.13 registers only memory mapped
//! in this process, so a dma-buf (host memory a driver exported: a
//! `udmabuf` memfd, a `vgem` buffer) is mapped here, shared, and the
//! mapping registered like any other memory. The keys own the mapping and
//! unmap it only after the registration is dropped (revoked at every peer
//! that fetched its key), so no access through the key lands in an
//! unmapped page. The mapping is never handed to the program: the memory
//! is reached by range, as device memory is on verbs.
//!
//! GPU memory cannot be mapped this way (its dma-bufs are not mappable by
//! the CPU, or not coherently): over UCX only host-memory dma-bufs work.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use ferrovia_mr::{MrError, RegisteredKeys, Registrar};
use ferrovia_types::AccessFlags;

use crate::keys::UcxRegistrar;

/// A shared mapping of part of a dma-buf, unmapped on drop.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory of this process, touched only by
// UCX through the registration (no Rust reference to it exists); unmapping
// happens once, on drop.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base..base+len` is the mapping made in `map`, unmapped
        // once here, after the keys that reach it were dropped (field
        // order of `DmabufKeys`).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Maps the dma-buf `fd` up to byte `offset + len`: the mapping, and the
/// address of byte `offset` in it. The mapping starts at the dma-buf's
/// first byte, whatever `offset` is: exporters do not all honour an mmap
/// offset (Linux 6.1's shmem GEM helpers, under `vgem`, fault in pages by
/// their place in the mapping, not in the buffer), so a mapping from an
/// offset could show another part of the buffer than the one registered.
fn map(fd: BorrowedFd<'_>, offset: u64, len: usize) -> Result<(Mapping, *mut u8), MrError> {
    let overflow = || MrError::Overflow {
        addr: offset,
        len: len as u64,
    };
    let lead = usize::try_from(offset).map_err(|_| overflow())?;
    let total = lead.checked_add(len).ok_or_else(overflow)?;
    // SAFETY: a fresh shared mapping of an open fd (the kernel checks the
    // range against the dma-buf and refuses one it cannot map); nothing of
    // this process is overwritten (no MAP_FIXED).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        return Err(MrError::Registrar(
            format!("mapping {total} bytes of the dma-buf for UCX: {e}").into(),
        ));
    }
    let base = NonNull::new(p.cast::<u8>())
        .ok_or_else(|| MrError::Registrar("mmap of the dma-buf returned a null mapping".into()))?;
    let mapping = Mapping { base, len: total };
    // SAFETY: `lead < total` (len > 0): inside the mapping.
    let at = unsafe { base.as_ptr().add(lead) };
    Ok((mapping, at))
}

/// A registration of a mapped dma-buf. Field order: the registration is
/// dropped (revoked, unregistered) before the mapping is unmapped.
struct DmabufKeys {
    keys: Box<dyn RegisteredKeys>,
    _mapping: Mapping,
}

// SAFETY: the inner keys keep their own promises (`UcxKeys`); the memory
// they reach, the mapping, stays mapped until they are dropped, which
// revokes them at every peer first.
unsafe impl RegisteredKeys for DmabufKeys {
    fn lkey(&self) -> u32 {
        self.keys.lkey()
    }
    fn rkey(&self) -> u32 {
        self.keys.rkey()
    }
    fn access(&self) -> AccessFlags {
        self.keys.access()
    }
}

/// Maps `len` bytes of `fd` from `offset` and registers the mapping with
/// RDMA address `iova` for its first byte.
pub(crate) fn register(
    registrar: &UcxRegistrar,
    fd: BorrowedFd<'_>,
    offset: u64,
    len: usize,
    iova: u64,
    access: AccessFlags,
) -> Result<Box<dyn RegisteredKeys>, MrError> {
    let (mapping, at) = map(fd, offset, len)?;
    // SAFETY: `len` bytes at `at` stay mapped for as long as the keys
    // exist: the keys and the mapping are dropped together, keys first.
    let keys = unsafe { registrar.register(at, len, Some(iova), access) }?;
    Ok(Box::new(DmabufKeys {
        keys,
        _mapping: mapping,
    }))
}
