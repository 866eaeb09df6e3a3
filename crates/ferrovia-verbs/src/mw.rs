//! Memory windows (type 2): a narrower grant over a registration, bound
//! by a work request on one queue pair and reached only through it, and
//! revoked by invalidating it (a local invalidate, or a peer's send with
//! invalidate) or deallocating it, far cheaper than deregistering.

use std::ptr::NonNull;
use std::sync::Arc;

use ferrovia_sys as sys;

use crate::error::{Result, VerbsError, last_errno, loaded};
use crate::pd::{PdInner, ProtectionDomain};

/// A type 2 memory window (`ibv_alloc_mw(IBV_MW_TYPE_2)`), unbound until a
/// bind request ([`SendWr::bind_window`](crate::SendWr::bind_window))
/// completes on a queue pair. Deallocating it (drop) revokes any binding.
pub struct MemoryWindow {
    mw: NonNull<sys::ibv_mw>,
    _pd: Arc<PdInner>,
}

// SAFETY: a window is a kernel object named by a handle; binding goes
// through work requests (the QP's locking), its rkey field is written only
// through `&mut self`, and deallocation happens once, in Drop.
unsafe impl Send for MemoryWindow {}
// SAFETY: as above.
unsafe impl Sync for MemoryWindow {}

impl MemoryWindow {
    /// Allocates a type 2 window in `pd`. A device that binds none (its
    /// capabilities lack `IBV_DEVICE_MEM_WINDOW_TYPE_2A/2B`, or the provider
    /// refuses) is [`VerbsError::Unsupported`], and nothing is allocated.
    pub fn alloc_type2(pd: &ProtectionDomain) -> Result<MemoryWindow> {
        let ctx = pd.context();
        ctx.query_device_ex()?.require_type2_windows()?;
        // SAFETY: a live PD; the window holds it alive.
        let mw = unsafe { sys::ibv_alloc_mw(pd.as_raw(), sys::IBV_MW_TYPE_2) };
        let mw = NonNull::new(mw).ok_or_else(|| VerbsError::Unsupported {
            device: ctx.name().to_owned(),
            what: "type 2 memory windows",
            detail: format!(
                "ibv_alloc_mw failed (errno {})",
                last_errno().unwrap_or(libc::EIO)
            ),
        })?;
        Ok(MemoryWindow {
            mw,
            _pd: pd.inner.clone(),
        })
    }

    /// The window's key: the one it was allocated with, then the one of
    /// its latest bind that completed ([`MemoryWindow::record_rkey`]).
    /// Peers reach a bound window with it.
    pub fn rkey(&self) -> u32 {
        // SAFETY: the live window; the field changes only under `&mut self`.
        unsafe { self.mw.as_ref().rkey }
    }

    /// The rkey for the next bind: the window's rkey with its low 8 bits
    /// (the key the consumer owns) advanced (`ibv_inc_rkey`), so an rkey
    /// of an earlier binding never reaches the new one.
    pub fn next_rkey(&self) -> u32 {
        // SAFETY: a pure function of its argument.
        unsafe { sys::ibv_inc_rkey(self.rkey()) }
    }

    /// Records that a bind with `rkey` completed: the window's key is now
    /// `rkey`. Providers name the window by its current key in the next
    /// bind (soft-RoCE refuses a bind naming an older one with
    /// `IBV_WC_MW_BIND_ERR`), as `ibv_bind_mw` does for type 1 windows.
    pub fn record_rkey(&mut self, rkey: u32) {
        // SAFETY: the live window; `&mut self` excludes a post reading
        // the field meanwhile.
        unsafe { (*self.mw.as_ptr()).rkey = rkey };
    }

    /// The raw window, for `ferrovia-sys` calls.
    pub fn as_raw(&self) -> *mut sys::ibv_mw {
        self.mw.as_ptr()
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        // SAFETY: allocated in `alloc_type2`, deallocated once here; the
        // kernel invalidates a bound window as it frees it.
        unsafe { loaded().map(|_| sys::ibv_dealloc_mw(self.mw.as_ptr())) };
    }
}

impl std::fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}
