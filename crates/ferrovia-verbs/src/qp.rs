//! Reliable-connected queue pairs: creation, posting, state.

use std::ptr::{NonNull, null_mut};
use std::sync::Arc;

use ferrovia_sys as sys;

use crate::cq::{CompletionQueue, CqInner};
use crate::endpoint::Endpoint;
use crate::error::{Result, VerbsError, check, lib, loaded, posted};
use crate::gid::GidEntry;
use crate::pd::{PdInner, ProtectionDomain};
use crate::port::{LinkLayer, PortAttributes};
use crate::post_ex;
use crate::qp_ex::{self, PostPath};
use crate::srq::{SharedReceiveQueue, SrqInner};
use crate::wr::{RecvWr, SendWr};

/// Queue sizes of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct QpCaps {
    /// Outstanding send-queue requests.
    pub max_send_wr: u32,
    /// Outstanding receive-queue requests.
    pub max_recv_wr: u32,
    /// SGEs per send request.
    pub max_send_sge: u32,
    /// SGEs per receive request.
    pub max_recv_sge: u32,
    /// Largest inline payload in bytes.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        }
    }
}

/// Chainable setters, one per field: `QpCaps::default().max_send_wr(..)`
/// (the struct is `#[non_exhaustive]`, so other crates cannot write it as
/// a literal).
impl QpCaps {
    /// Sets the `max_send_wr` field.
    #[must_use]
    pub fn max_send_wr(mut self, max_send_wr: u32) -> Self {
        self.max_send_wr = max_send_wr;
        self
    }

    /// Sets the `max_recv_wr` field.
    #[must_use]
    pub fn max_recv_wr(mut self, max_recv_wr: u32) -> Self {
        self.max_recv_wr = max_recv_wr;
        self
    }

    /// Sets the `max_send_sge` field.
    #[must_use]
    pub fn max_send_sge(mut self, max_send_sge: u32) -> Self {
        self.max_send_sge = max_send_sge;
        self
    }

    /// Sets the `max_recv_sge` field.
    #[must_use]
    pub fn max_recv_sge(mut self, max_recv_sge: u32) -> Self {
        self.max_recv_sge = max_recv_sge;
        self
    }

    /// Sets the `max_inline_data` field.
    #[must_use]
    pub fn max_inline_data(mut self, max_inline_data: u32) -> Self {
        self.max_inline_data = max_inline_data;
        self
    }
}

/// The state of a QP (`enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpState {
    /// Just created.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    ReadyToReceive,
    /// Ready to send: connected.
    ReadyToSend,
    /// Send queue drained.
    SendQueueDrained,
    /// Send queue error.
    SendQueueError,
    /// Error: every request is flushed.
    Error,
    /// Any other value.
    Other(u32),
}

impl QpState {
    fn from_raw(v: u32) -> Self {
        match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::ReadyToReceive,
            3 => QpState::ReadyToSend,
            4 => QpState::SendQueueDrained,
            5 => QpState::SendQueueError,
            6 => QpState::Error,
            o => QpState::Other(o),
        }
    }
}

/// Builds an RC [`QueuePair`].
#[derive(Debug)]
pub struct QueuePairBuilder<'a> {
    pd: &'a ProtectionDomain,
    send_cq: &'a CompletionQueue,
    recv_cq: &'a CompletionQueue,
    caps: QpCaps,
    port: Option<u8>,
    srq: Option<&'a SharedReceiveQueue>,
    post_path: PostPath,
    pub(crate) qp_type: sys::ibv_qp_type,
}

impl<'a> QueuePairBuilder<'a> {
    /// How the send queue is posted to (default [`PostPath::Auto`]:
    /// `ibv_wr_*` where the provider offers it).
    pub fn post_path(mut self, path: PostPath) -> Self {
        self.post_path = path;
        self
    }

    /// Takes receives from `srq` instead of a receive queue of its own
    /// (`max_recv_wr` is then ignored).
    pub fn srq(mut self, srq: &'a SharedReceiveQueue) -> Self {
        self.srq = Some(srq);
        self
    }

    /// Queue sizes (default: [`QpCaps::default`]).
    pub fn caps(mut self, caps: QpCaps) -> Self {
        self.caps = caps;
        self
    }

    /// The port to use (default: the first active port).
    pub fn port(mut self, port: u8) -> Self {
        self.port = Some(port);
        self
    }

    /// Creates the QP (in the RESET state) and picks its GID.
    pub fn build(self) -> Result<QueuePair> {
        let ctx = self.pd.context();
        let port_attr = match self.port {
            Some(p) => ctx.query_port(p)?,
            None => ctx.active_port()?,
        };
        // RoCE needs a GID for every packet; on InfiniBand it is optional
        // (LID routing), so a missing one is only an error on Ethernet.
        let gid = match ctx.pick_gid(port_attr.port) {
            Ok(g) => Some(g),
            Err(e) if port_attr.link_layer == LinkLayer::Ethernet => return Err(e),
            Err(_) => None,
        };
        let mut init = sys::ibv_qp_init_attr {
            send_cq: self.send_cq.as_raw(),
            recv_cq: self.recv_cq.as_raw(),
            cap: sys::ibv_qp_cap {
                max_send_wr: self.caps.max_send_wr,
                max_recv_wr: self.caps.max_recv_wr,
                max_send_sge: self.caps.max_send_sge,
                max_recv_sge: self.caps.max_recv_sge,
                max_inline_data: self.caps.max_inline_data,
            },
            qp_type: self.qp_type,
            sq_sig_all: 0,
            srq: self.srq.map_or(null_mut(), SharedReceiveQueue::as_raw),
            ..Default::default()
        };
        // The PD and CQs (and SRQ) are kept alive by the QP below.
        let qp_ex::Created { qp, ex } =
            qp_ex::create(&ctx, self.pd.as_raw(), &mut init, self.post_path)?;
        match &gid {
            Some(g) => tracing::debug!(
                "QP type {} on {} port {} ({:?}): GID index {} {} ({:?}), {}",
                self.qp_type,
                ctx.name(),
                port_attr.port,
                port_attr.link_layer,
                g.index,
                g.gid,
                g.gid_type,
                if ex.is_some() {
                    "ibv_wr_*"
                } else {
                    "ibv_post_send"
                }
            ),
            None => tracing::debug!(
                "RC QP on {} port {} (LID {}), no GID",
                ctx.name(),
                port_attr.port,
                port_attr.lid
            ),
        }
        // ibv_create_qp writes back the sizes actually granted.
        let caps = QpCaps {
            max_send_wr: init.cap.max_send_wr,
            max_recv_wr: init.cap.max_recv_wr,
            max_send_sge: init.cap.max_send_sge,
            max_recv_sge: init.cap.max_recv_sge,
            max_inline_data: init.cap.max_inline_data,
        };
        Ok(QueuePair {
            qp,
            ex,
            ud: self.qp_type == sys::IBV_QPT_UD,
            caps,
            port: port_attr,
            gid,
            psn: initial_psn(qp.as_ptr() as usize),
            pd: self.pd.inner.clone(),
            _send_cq: self.send_cq.inner.clone(),
            _recv_cq: self.recv_cq.inner.clone(),
            _srq: self.srq.map(|s| s.inner.clone()),
        })
    }
}

/// A 24-bit starting PSN that differs between QPs and runs.
fn initial_psn(salt: usize) -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_usize(salt);
    (h.finish() as u32) & 0x00ff_ffff
}

/// A reliable-connected queue pair (`struct ibv_qp`, `IBV_QPT_RC`).
pub struct QueuePair {
    qp: NonNull<sys::ibv_qp>,
    /// The extended view, when posts go through `ibv_wr_*`.
    ex: Option<NonNull<sys::ibv_qp_ex>>,
    /// A datagram (UD) queue pair.
    ud: bool,
    caps: QpCaps,
    port: PortAttributes,
    gid: Option<GidEntry>,
    psn: u32,
    pub(crate) pd: Arc<PdInner>,
    _send_cq: Arc<CqInner>,
    _recv_cq: Arc<CqInner>,
    /// The shared receive queue it takes receives from, kept alive.
    _srq: Option<Arc<SrqInner>>,
}

// SAFETY: posting and modifying QPs is thread-safe in libibverbs.
unsafe impl Send for QueuePair {}
// SAFETY: as above.
unsafe impl Sync for QueuePair {}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: created in build(), destroyed once. CQs and PD outlive it.
        unsafe { loaded().map(|l| l.ibv_destroy_qp(self.qp.as_ptr())) };
    }
}

impl QueuePair {
    /// Starts building an RC QP on `pd` whose completions go to the CQs.
    pub fn builder<'a>(
        pd: &'a ProtectionDomain,
        send_cq: &'a CompletionQueue,
        recv_cq: &'a CompletionQueue,
    ) -> QueuePairBuilder<'a> {
        QueuePairBuilder {
            pd,
            send_cq,
            recv_cq,
            caps: QpCaps::default(),
            port: None,
            srq: None,
            post_path: PostPath::Auto,
            qp_type: sys::IBV_QPT_RC,
        }
    }

    /// How posts reach the send queue: [`PostPath::Extended`]
    /// (`ibv_wr_*`) or [`PostPath::Classic`] (`ibv_post_send`).
    pub fn post_path(&self) -> PostPath {
        if self.ex.is_some() {
            PostPath::Extended
        } else {
            PostPath::Classic
        }
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: live QP.
        unsafe { self.qp.as_ref().qp_num }
    }

    /// The queue sizes the device granted.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The port the QP uses (as queried at creation).
    pub fn port(&self) -> &PortAttributes {
        &self.port
    }

    /// The local GID the QP routes with, if any.
    pub fn gid(&self) -> Option<&GidEntry> {
        self.gid.as_ref()
    }

    /// What a peer needs to connect to this QP.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            qpn: self.qp_num(),
            psn: self.psn,
            lid: self.port.lid,
            gid: self.gid.map(|g| g.gid).unwrap_or_default(),
            port: self.port.port,
            mtu: self.port.active_mtu,
        }
    }

    /// The raw QP, for `ferrovia-sys` calls.
    pub fn as_raw(&self) -> *mut sys::ibv_qp {
        self.qp.as_ptr()
    }

    /// The protection domain the QP was created in.
    pub fn pd(&self) -> ProtectionDomain {
        ProtectionDomain {
            inner: self.pd.clone(),
        }
    }

    pub(crate) fn local_psn(&self) -> u32 {
        self.psn
    }

    pub(crate) fn modify(
        &self,
        attr: &mut sys::ibv_qp_attr,
        mask: u32,
        verb: &'static str,
    ) -> Result<()> {
        // SAFETY: live QP; `attr` is valid for the fields in `mask`.
        check(verb, unsafe {
            lib()?.ibv_modify_qp(self.as_raw(), attr, mask as i32)
        })
    }

    /// The current state, from `ibv_query_qp`.
    pub fn state(&self) -> Result<QpState> {
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        let mask = sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32;
        // SAFETY: live QP and valid out-pointers.
        check("ibv_query_qp", unsafe {
            lib()?.ibv_query_qp(self.as_raw(), &mut attr, mask, &mut init)
        })?;
        Ok(QpState::from_raw(attr.qp_state.0))
    }

    /// Moves the QP to the error state: every outstanding request completes
    /// with `IBV_WC_WR_FLUSH_ERR` and the device stops touching their
    /// buffers.
    pub fn to_error(&self) -> Result<()> {
        let mut attr = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_ERR,
            ..Default::default()
        };
        self.modify(
            &mut attr,
            sys::ibv_qp_attr_mask::IBV_QP_STATE.0,
            "ibv_modify_qp(ERR)",
        )
    }

    /// Posts a send-queue request (or a list linked with
    /// [`link_send`](crate::link_send)) with one doorbell.
    ///
    /// # Safety
    /// Every SGE's memory must stay allocated, and must not be written by
    /// the program (read, for an RDMA read's target), until the request
    /// (or, if unsignalled, a later signalled one on this QP) has completed
    /// or been flushed. Keys need no promise: the device checks each SGE's
    /// lkey against this QP's PD, the key's registration range and its
    /// access (a mismatch fails the request with `IBV_WC_LOC_PROT_ERR`
    /// without touching memory), and the peer's NIC checks remote
    /// addresses and rkeys.
    pub unsafe fn post_send(&self, wr: &mut SendWr<'_>) -> Result<()> {
        // SAFETY: this live QP, its extended view if it has one (made by
        // ibv_create_qp_ex with send_ops_flags), and our caller's
        // promises about the memory.
        unsafe { send_path(self.qp, self.ex, self.ud, wr) }
    }

    /// Posts a receive request (or a linked list of them) with one
    /// doorbell.
    ///
    /// # Safety
    /// Every SGE's memory must stay allocated and be neither read nor
    /// written by the program until the receive has completed or been
    /// flushed. As for sends, the device checks each SGE's lkey, range and
    /// `LOCAL_WRITE` right and fails the receive instead of writing memory
    /// outside a matching registration.
    pub unsafe fn post_recv(&self, wr: &mut RecvWr<'_>) -> Result<()> {
        let mut bad = null_mut();
        // SAFETY: as in `post_send`: a live QP, a list whose SGE arrays
        // live for the call, and memory our caller keeps valid and
        // untouched until the receive completes or is flushed.
        let ret = unsafe { sys::ibv_post_recv(self.as_raw(), wr.as_raw(), &mut bad) };
        // SAFETY: as in `post_send`.
        posted("ibv_post_recv", ret, wr.wr_id(), || unsafe {
            bad.as_ref().map(|b| b.wr_id)
        })
    }
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qp_num", &self.qp_num())
            .field("port", &self.port.port)
            .field("caps", &self.caps)
            .finish()
    }
}

/// Posts `wr` (a list) to the send queue of `qp`: through `ex`'s
/// `ibv_wr_*` when given, else `ibv_post_send`.
///
/// # Safety
/// `qp` is a live QP and `ex` its extended view (from `ibv_create_qp_ex`
/// with send_ops_flags) or `None`; `ud` says whether it is a datagram QP;
/// the memory the list names follows [`QueuePair::post_send`]'s contract.
#[inline]
pub(crate) unsafe fn send_path(
    qp: NonNull<sys::ibv_qp>,
    ex: Option<NonNull<sys::ibv_qp_ex>>,
    ud: bool,
    wr: &mut SendWr<'_>,
) -> Result<()> {
    // SAFETY: `wr.as_raw()` is a valid list for the call.
    if let Some(ex) = ex.filter(|_| unsafe { post_ex::fits(wr.as_raw()) }) {
        // SAFETY: our caller's contract; a refused batch posted nothing.
        return unsafe { post_ex::post(ex, wr.as_raw(), ud) }.map_err(|errno| VerbsError::Post {
            verb: "ibv_wr_complete",
            errno,
            bad_wr_id: wr.wr_id(),
        });
    }
    let mut bad = null_mut();
    // SAFETY: `qp` is live; `wr.as_raw()` is a list of `ibv_send_wr`s
    // whose SGE arrays are borrowed by `wr` for the call (the provider
    // copies them into the WQE before returning); the memory the SGEs name
    // is kept valid and race-free until completion by our caller.
    let ret = unsafe { sys::ibv_post_send(qp.as_ptr(), wr.as_raw(), &mut bad) };
    // SAFETY: only read on failure, when `bad` is NULL or points into
    // the caller's list, which `wr` still borrows.
    posted("ibv_post_send", ret, wr.wr_id(), || unsafe {
        bad.as_ref().map(|b| b.wr_id)
    })
}
