//! Shared receive queues (`ibv_create_srq`): one pool of receives that
//! any QP attached to it consumes, with a low-watermark limit event.

use std::ptr::{NonNull, null_mut};
use std::sync::Arc;

use ferrovia_sys as sys;

use crate::error::{Result, VerbsError, check, lib, loaded, null_error};
use crate::pd::{PdInner, ProtectionDomain};
use crate::wr::RecvWr;

/// A shared receive queue (`struct ibv_srq`). QPs built with
/// [`QueuePairBuilder::srq`](crate::QueuePairBuilder::srq) take their
/// receives from it instead of from a queue of their own.
pub struct SharedReceiveQueue {
    pub(crate) inner: Arc<SrqInner>,
}

pub(crate) struct SrqInner {
    pub(crate) srq: NonNull<sys::ibv_srq>,
    max_wr: u32,
    max_sge: u32,
    _pd: Arc<PdInner>,
}

// SAFETY: libibverbs SRQs are thread-safe (posting and modifying lock in
// the provider).
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once; every QP attached to it
        // holds an `Arc` of this, so none is left.
        unsafe { loaded().map(|l| l.ibv_destroy_srq(self.srq.as_ptr())) };
    }
}

impl SharedReceiveQueue {
    /// A shared receive queue of `max_wr` receives of up to `max_sge`
    /// elements each, in `pd`.
    pub fn new(pd: &ProtectionDomain, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue> {
        if max_wr == 0 || max_sge == 0 {
            return Err(VerbsError::InvalidArgument(format!(
                "a shared receive queue needs max_wr and max_sge of at least 1 (got {max_wr}, {max_sge})"
            )));
        }
        let mut init = sys::ibv_srq_init_attr {
            srq_context: null_mut(),
            attr: sys::ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: a live PD (kept alive by the SRQ below) and a valid
        // attribute struct the call reads and writes back.
        let srq = unsafe { lib()?.ibv_create_srq(pd.as_raw(), &mut init) };
        let srq = NonNull::new(srq).ok_or_else(|| null_error("ibv_create_srq"))?;
        Ok(SharedReceiveQueue {
            inner: Arc::new(SrqInner {
                srq,
                max_wr: init.attr.max_wr,
                max_sge: init.attr.max_sge,
                _pd: pd.inner.clone(),
            }),
        })
    }

    /// Receives it holds at most (as granted by the device).
    pub fn max_wr(&self) -> u32 {
        self.inner.max_wr
    }

    /// Elements per receive at most.
    pub fn max_sge(&self) -> u32 {
        self.inner.max_sge
    }

    /// The raw SRQ, for identifying its async events.
    pub fn as_raw(&self) -> *mut sys::ibv_srq {
        self.inner.srq.as_ptr()
    }

    /// Arms the low watermark: once fewer than `limit` receives remain
    /// posted, the device raises one `IBV_EVENT_SRQ_LIMIT_REACHED` async
    /// event ([`Context::next_async_event`](crate::Context::next_async_event))
    /// and disarms; arm it again after refilling.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        let mut attr = sys::ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: limit,
        };
        let mask = sys::ibv_srq_attr_mask::IBV_SRQ_LIMIT.0 as i32;
        // SAFETY: a live SRQ and an attribute struct valid for the call.
        check("ibv_modify_srq(IBV_SRQ_LIMIT)", unsafe {
            lib()?.ibv_modify_srq(self.as_raw(), &mut attr, mask)
        })
    }

    /// Posts a receive (or a linked list of them) to the shared pool.
    ///
    /// # Safety
    /// As for [`QueuePair::post_recv`](crate::QueuePair::post_recv): every
    /// element's memory must stay allocated and untouched by the program
    /// until the receive completes or is flushed (an SRQ's receives are
    /// flushed when the SRQ is destroyed, which waits for every attached QP
    /// to go first).
    pub unsafe fn post_recv(&self, wr: &mut RecvWr<'_>) -> Result<()> {
        let mut bad = null_mut();
        // SAFETY: a live SRQ; a list whose SGE arrays live for the call;
        // memory our caller keeps valid and untouched until completion.
        let ret = unsafe { sys::ibv_post_srq_recv(self.as_raw(), wr.as_raw(), &mut bad) };
        // SAFETY: only read on failure, when `bad` is NULL or points into
        // the caller's list, which `wr` still borrows.
        crate::error::posted("ibv_post_srq_recv", ret, wr.wr_id(), || unsafe {
            bad.as_ref().map(|b| b.wr_id)
        })
    }
}

impl std::fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("max_wr", &self.inner.max_wr)
            .field("max_sge", &self.inner.max_sge)
            .finish()
    }
}
