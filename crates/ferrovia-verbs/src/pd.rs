//! Protection domains.

use std::ptr::NonNull;
use std::sync::Arc;

use ferrovia_sys as sys;

use crate::context::{Context, ContextInner};
use crate::error::{Result, lib, loaded, null_error};

/// A protection domain (`struct ibv_pd`): QPs and MRs in one PD may be used
/// together. Cheap to clone; keeps its context open.
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

pub(crate) struct PdInner {
    pub(crate) pd: NonNull<sys::ibv_pd>,
    pub(crate) ctx: Arc<ContextInner>,
}

// SAFETY: verbs objects are thread-safe in libibverbs.
unsafe impl Send for PdInner {}
// SAFETY: as above.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: MRs and QPs hold an Arc to this PD, so none is left.
        unsafe { loaded().map(|l| l.ibv_dealloc_pd(self.pd.as_ptr())) };
    }
}

impl ProtectionDomain {
    /// Allocates a protection domain on `ctx`.
    pub fn new(ctx: &Context) -> Result<ProtectionDomain> {
        // SAFETY: valid context.
        let pd = unsafe { lib()?.ibv_alloc_pd(ctx.as_raw()) };
        let pd = NonNull::new(pd).ok_or_else(|| null_error("ibv_alloc_pd"))?;
        Ok(ProtectionDomain {
            inner: Arc::new(PdInner {
                pd,
                ctx: ctx.inner.clone(),
            }),
        })
    }

    /// The context this PD belongs to.
    pub fn context(&self) -> Context {
        Context {
            inner: self.inner.ctx.clone(),
        }
    }

    /// The raw PD, for `ferrovia-sys` calls.
    pub fn as_raw(&self) -> *mut sys::ibv_pd {
        self.inner.pd.as_ptr()
    }
}

impl std::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("device", &self.inner.ctx.name)
            .finish()
    }
}
