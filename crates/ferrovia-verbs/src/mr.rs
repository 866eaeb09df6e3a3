//! Raw memory regions (`ibv_reg_mr`), deregistered on drop.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use ferrovia_sys as sys;

use crate::error::{Result, VerbsError, lib, loaded, null_error};
use crate::pd::{PdInner, ProtectionDomain};
use ferrovia_types::AccessFlags;

/// A registered memory region (`struct ibv_mr`).
///
/// This is the raw registration: it does not own or borrow the memory, so
/// creating one is `unsafe`. `ferrovia-mr` builds owned and borrowed
/// registrations on top of it.
pub struct MemoryRegion {
    mr: NonNull<sys::ibv_mr>,
    addr: usize,
    len: usize,
    iova: u64,
    access: AccessFlags,
    /// Registered from a dma-buf: no CPU address of this process.
    dmabuf: bool,
    _pd: Arc<PdInner>,
}

// SAFETY: an ibv_mr is immutable after registration; deregistration happens
// once, in Drop.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Registers `len` bytes at `addr`; the RDMA address equals `addr`.
    ///
    /// # Safety
    /// The memory `addr..addr+len` must stay allocated (not freed or
    /// unmapped) for as long as the returned region exists and any work
    /// request using it may still be executed by the device, and nothing may
    /// read or write it in ways that race with DMA the caller posts.
    pub unsafe fn register(
        pd: &ProtectionDomain,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        Self::check(pd, len, access)?;
        // SAFETY: `pd` is live (borrowed); `ibv_reg_mr` pins and maps
        // `addr..addr+len`, which our caller keeps allocated for as long as
        // the region (and any work using it) lives: this function's
        // contract, the one the kernel needs.
        let mr = unsafe { lib()?.ibv_reg_mr(pd.as_raw(), addr.cast(), len, access.bits() as i32) };
        Self::finish(
            pd,
            mr,
            "ibv_reg_mr",
            addr as usize,
            len,
            addr as u64,
            access,
        )
    }

    /// Registers `len` bytes at `addr` with RDMA address `iova` (a
    /// zero-based registration when `iova` is 0): peers address byte `i` of
    /// the region as `iova + i`.
    ///
    /// # Safety
    /// As for [`MemoryRegion::register`].
    pub unsafe fn register_iova(
        pd: &ProtectionDomain,
        addr: *mut u8,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        Self::check(pd, len, access)?;
        // SAFETY: as for `ibv_reg_mr` in `register`: a live PD and memory
        // our caller keeps allocated while the region lives; `iova` is
        // only an address the device translates.
        let mr = unsafe {
            lib()?.ibv_reg_mr_iova(pd.as_raw(), addr.cast(), len, iova, access.bits() as i32)
        };
        Self::finish(pd, mr, "ibv_reg_mr_iova", addr as usize, len, iova, access)
    }

    /// Registers `len` bytes of the dma-buf `fd` from byte `offset`, with
    /// RDMA address `iova` for its first byte (0: zero-based): the device
    /// reaches memory another driver exported (a GPU's, or host memory
    /// from `udmabuf`). The registration holds the dma-buf, so its memory
    /// cannot go away under it, and `fd` may be closed afterwards; nothing
    /// of it is mapped in this process, so SGEs name it by RDMA address.
    ///
    /// `offset + len` must lie within the dma-buf, and `iova` and
    /// `offset` must share their offset within a page. A device whose
    /// provider has no dma-buf registration (soft-RoCE) is
    /// [`VerbsError::Unsupported`] with the errno, and registers nothing.
    pub fn register_dmabuf(
        pd: &ProtectionDomain,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        Self::check(pd, len, access)?;
        // SAFETY: a live PD and an open fd; the kernel takes its own
        // reference to the dma-buf (refusing an fd that is not one), so no
        // memory of this process is named.
        let mr = unsafe {
            lib()?.ibv_reg_dmabuf_mr(
                pd.as_raw(),
                offset,
                len,
                iova,
                fd.as_raw_fd(),
                access.bits() as i32,
            )
        };
        match NonNull::new(mr) {
            Some(_) => {
                let mut r = Self::finish(
                    pd,
                    mr,
                    "ibv_reg_dmabuf_mr",
                    iova as usize,
                    len,
                    iova,
                    access,
                )?;
                r.dmabuf = true;
                Ok(r)
            }
            None => {
                let errno = crate::error::last_errno().unwrap_or(libc::EIO);
                if matches!(errno, libc::EOPNOTSUPP | libc::ENOSYS) {
                    return Err(VerbsError::Unsupported {
                        device: pd.context().name().to_owned(),
                        what: "dma-buf registration",
                        detail: format!("ibv_reg_dmabuf_mr failed with errno {errno} (EOPNOTSUPP)"),
                    });
                }
                Err(VerbsError::Verb {
                    verb: "ibv_reg_dmabuf_mr",
                    errno,
                })
            }
        }
    }

    /// Refuses what cannot be registered before asking the device: no
    /// bytes, or on-demand paging on a device without it (typed, naming
    /// the capability).
    fn check(pd: &ProtectionDomain, len: usize, access: AccessFlags) -> Result<()> {
        if len == 0 {
            return Err(VerbsError::InvalidArgument(
                "cannot register a zero-length memory region".into(),
            ));
        }
        if access.contains(AccessFlags::ON_DEMAND) {
            pd.context().query_device_ex()?.require_odp()?;
        }
        Ok(())
    }

    fn finish(
        pd: &ProtectionDomain,
        mr: *mut sys::ibv_mr,
        verb: &'static str,
        addr: usize,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        let mr = NonNull::new(mr).ok_or_else(|| null_error(verb))?;
        Ok(MemoryRegion {
            mr,
            addr,
            len,
            iova,
            access,
            dmabuf: false,
            _pd: pd.inner.clone(),
        })
    }

    /// The raw region, for `ferrovia-sys` calls (a window's bind names it).
    pub fn as_raw(&self) -> *mut sys::ibv_mr {
        self.mr.as_ptr()
    }

    /// The protection domain it was registered in.
    pub fn pd(&self) -> ProtectionDomain {
        ProtectionDomain {
            inner: self._pd.clone(),
        }
    }

    /// Local key, for SGEs.
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is live until Drop.
        unsafe { self.mr.as_ref().lkey }
    }

    /// Remote key, for peers' RDMA reads and writes.
    pub fn rkey(&self) -> u32 {
        // SAFETY: the MR is live until Drop.
        unsafe { self.mr.as_ref().rkey }
    }

    /// Virtual address of the first registered byte.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Registered length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: zero-length registrations are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// RDMA address of the first byte (differs from `addr` for
    /// zero-based registrations).
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// The access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// Whether it was registered from a dma-buf (no CPU address here).
    pub fn is_dmabuf(&self) -> bool {
        self.dmabuf
    }

    /// Advises the device about `len` bytes at RDMA address `addr` of this
    /// on-demand region (`ibv_advise_mr`): prefetch them (for reading, or
    /// for writing), so the first access takes no page fault. Waits for
    /// the prefetch (`IBV_ADVISE_MR_FLAG_FLUSH`). A device without
    /// on-demand paging, or a region not registered on demand, is a typed
    /// refusal.
    pub fn prefetch(&self, addr: u64, len: u32, for_write: bool) -> Result<()> {
        let pd = self.pd();
        pd.context().query_device_ex()?.require_odp()?;
        if !self.access.contains(AccessFlags::ON_DEMAND) {
            return Err(VerbsError::InvalidArgument(
                "prefetch needs a region registered on demand (AccessFlags::ON_DEMAND)".into(),
            ));
        }
        let advice = if for_write {
            sys::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE
        } else {
            sys::IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH
        };
        let mut sge = sys::ibv_sge {
            addr,
            length: len,
            lkey: self.lkey(),
        };
        // SAFETY: a live PD and region; the one SGE names this region's
        // own key and range (the provider checks it); nothing is written.
        let ret = unsafe {
            sys::ibv_advise_mr(
                pd.as_raw(),
                advice,
                sys::IB_UVERBS_ADVISE_MR_FLAG_FLUSH,
                &mut sge,
                1,
            )
        };
        match ret {
            0 => Ok(()),
            libc::EOPNOTSUPP | libc::ENOSYS => Err(VerbsError::Unsupported {
                device: pd.context().name().to_owned(),
                what: "ibv_advise_mr (prefetch)",
                detail: format!("ibv_advise_mr failed with errno {ret}"),
            }),
            r => crate::error::check("ibv_advise_mr", r),
        }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: registered in a constructor, deregistered once here.
        unsafe { loaded().map(|l| l.ibv_dereg_mr(self.mr.as_ptr())) };
    }
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish()
    }
}
