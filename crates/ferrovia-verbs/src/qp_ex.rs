//! Creating a queue pair through `ibv_create_qp_ex`, with the send
//! operations it will post (`send_ops_flags`), so it can be posted to
//! through `ibv_wr_*`; or through `ibv_create_qp` where the provider
//! offers no extended queue pair, with the reason logged.

use std::collections::HashSet;
use std::ptr::NonNull;
use std::sync::Mutex;

use ferrovia_sys as sys;

use crate::context::Context;
use crate::error::{Result, VerbsError, last_errno, lib, null_error};

/// How a queue pair's send queue is posted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PostPath {
    /// `ibv_wr_*` where the provider offers it, else `ibv_post_send`
    /// (the reason is logged once per device).
    #[default]
    Auto,
    /// `ibv_post_send`, with a list of `struct ibv_send_wr`.
    Classic,
    /// `ibv_wr_start` / `ibv_wr_*` / `ibv_wr_complete`; a device that
    /// does not offer it is a typed error ([`VerbsError::Unsupported`]).
    Extended,
}

/// A freshly created QP, and its extended view when it has one.
pub(crate) struct Created {
    pub(crate) qp: NonNull<sys::ibv_qp>,
    pub(crate) ex: Option<NonNull<sys::ibv_qp_ex>>,
}

/// The send operations a QP of `qp_type` asks the provider for.
fn send_ops(ctx: &Context, qp_type: sys::ibv_qp_type) -> Result<u64> {
    if qp_type == sys::IBV_QPT_UD {
        return Ok(u64::from(
            sys::IBV_QP_EX_WITH_SEND | sys::IBV_QP_EX_WITH_SEND_WITH_IMM,
        ));
    }
    let caps = ctx.query_device_ex()?;
    let mut ops = sys::IBV_QP_EX_WITH_RDMA_WRITE
        | sys::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
        | sys::IBV_QP_EX_WITH_SEND
        | sys::IBV_QP_EX_WITH_SEND_WITH_IMM
        | sys::IBV_QP_EX_WITH_RDMA_READ;
    if ctx.query_device()?.atomic_cap.supported() {
        ops |= sys::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | sys::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    }
    if caps.windows.type2 {
        ops |= sys::IBV_QP_EX_WITH_BIND_MW
            | sys::IBV_QP_EX_WITH_LOCAL_INV
            | sys::IBV_QP_EX_WITH_SEND_WITH_INV;
    }
    Ok(u64::from(ops))
}

/// The builders every request of the QP's kind needs, by name, as the
/// provider set them (`None`: missing).
fn required(x: &sys::ibv_qp_ex, ud: bool) -> [(&'static str, bool); 6] {
    [
        ("wr_start", x.wr_start.is_some()),
        ("wr_complete", x.wr_complete.is_some()),
        ("wr_abort", x.wr_abort.is_some()),
        ("wr_send", x.wr_send.is_some()),
        ("wr_set_sge", x.wr_set_sge.is_some()),
        if ud {
            ("wr_set_ud_addr", x.wr_set_ud_addr.is_some())
        } else {
            ("wr_rdma_write", x.wr_rdma_write.is_some())
        },
    ]
}

/// Logs why a device falls back, once per device and reason.
fn fall_back(device: &str, why: &str) {
    static SAID: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let key = format!("{device}: {why}");
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.get_or_insert_with(HashSet::new).insert(key) {
        tracing::info!("{device}: posting through ibv_post_send: {why}");
    }
}

/// Creates a QP with `init`'s attributes (written back with the granted
/// caps), extended as `path` says.
pub(crate) fn create(
    ctx: &Context,
    pd: *mut sys::ibv_pd,
    init: &mut sys::ibv_qp_init_attr,
    path: PostPath,
) -> Result<Created> {
    if path == PostPath::Classic {
        return classic(pd, init);
    }
    let ud = init.qp_type == sys::IBV_QPT_UD;
    let unsupported = |detail: String| VerbsError::Unsupported {
        device: ctx.name().to_owned(),
        what: "extended queue pairs (ibv_create_qp_ex with send_ops_flags)",
        detail,
    };
    let mut attr = sys::ibv_qp_init_attr_ex {
        qp_context: init.qp_context,
        send_cq: init.send_cq,
        recv_cq: init.recv_cq,
        srq: init.srq,
        cap: init.cap,
        qp_type: init.qp_type,
        sq_sig_all: init.sq_sig_all,
        comp_mask: sys::IBV_QP_INIT_ATTR_PD | sys::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        pd,
        send_ops_flags: send_ops(ctx, init.qp_type)?,
        ..Default::default()
    };
    // SAFETY: a live context and PD, CQs (and SRQ) the caller keeps alive
    // with the QP; the attributes are fully initialised.
    let qp = unsafe { sys::ferrovia_create_qp_ex(ctx.as_raw(), &mut attr) };
    let Some(qp) = NonNull::new(qp) else {
        let errno = last_errno().unwrap_or(libc::EIO);
        let why = format!(
            "ibv_create_qp_ex refused send_ops_flags {:#x} (errno {errno})",
            attr.send_ops_flags
        );
        if path == PostPath::Extended {
            return Err(unsupported(why));
        }
        fall_back(ctx.name(), &why);
        return classic(pd, init);
    };
    // SAFETY: `qp` was made by ibv_create_qp_ex with SEND_OPS_FLAGS, so it
    // is a `verbs_qp` and the cast inside ibv_qp_to_qp_ex is valid (on a QP
    // from plain ibv_create_qp it reads past the allocation).
    let ex = NonNull::new(unsafe { lib()?.ibv_qp_to_qp_ex(qp.as_ptr()) });
    let missing = match ex {
        None => Some("ibv_qp_ex"),
        // SAFETY: the extended view of the live QP just created.
        Some(x) => required(unsafe { x.as_ref() }, ud)
            .into_iter()
            .find(|(_, set)| !set)
            .map(|(name, _)| name),
    };
    if let Some(name) = missing {
        // SAFETY: created above, used by nothing yet.
        unsafe { lib()?.ibv_destroy_qp(qp.as_ptr()) };
        let why = format!(
            "the provider's extended QP has no {name} (calling it would crash: rust-ibverbs #151)"
        );
        if path == PostPath::Extended {
            return Err(unsupported(why));
        }
        fall_back(ctx.name(), &why);
        return classic(pd, init);
    }
    init.cap = attr.cap;
    Ok(Created { qp, ex })
}

fn classic(pd: *mut sys::ibv_pd, init: &mut sys::ibv_qp_init_attr) -> Result<Created> {
    // SAFETY: a live PD and CQs the caller keeps alive with the QP.
    let qp = unsafe { lib()?.ibv_create_qp(pd, init) };
    let qp = NonNull::new(qp).ok_or_else(|| null_error("ibv_create_qp"))?;
    Ok(Created { qp, ex: None })
}
