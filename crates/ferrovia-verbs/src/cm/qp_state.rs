//! Moving a ferrovia [`QueuePair`] through INIT, RTR and RTS with the
//! attributes the connection manager computed for its connection
//! (`rdma_init_qp_attr`), as librdmacm does for a QP it owns and as
//! `rping -q` does for its own.

use std::net::SocketAddr;

use ferrovia_sys as sys;
use sys::ibv_qp_attr_mask as M;

use crate::cm::error::{CmError, CmResult};
use crate::cm::id::CmId;
use crate::cm::params::Depths;
use crate::port::LinkLayer;
use crate::qp::{QpState, QueuePair};

/// Bits of the RTR mask the kernel's rdma_ucm reports wrongly on
/// InfiniBand ports (librdmacm masks them off too).
const IB_RTR_MASK_WORKAROUND: u32 = 0x00e0_0000;

/// Checks that `qp` is on the device and port the id is bound to.
pub(crate) fn check_device(id: &CmId, qp: &QueuePair, addr: SocketAddr) -> CmResult<()> {
    let qp_device = qp.pd().context().name().to_owned();
    let qp_port = qp.port().port;
    let cm_device = id.device_name().unwrap_or_default();
    let cm_port = id.port_num();
    if cm_device != qp_device || cm_port != qp_port {
        return Err(CmError::DeviceMismatch {
            addr,
            cm_device,
            cm_port,
            qp_device,
            qp_port,
        });
    }
    Ok(())
}

/// The QP's state, as a connection-manager error on failure.
pub(crate) fn state(qp: &QueuePair, addr: SocketAddr) -> CmResult<QpState> {
    qp.state().map_err(|source| CmError::Verbs { addr, source })
}

/// One transition with the connection manager's attributes, adjusted by
/// `tweak` (attributes and mask) before `ibv_modify_qp`.
fn step(
    id: &CmId,
    qp: &QueuePair,
    addr: SocketAddr,
    state: sys::ibv_qp_state,
    verb: &'static str,
    tweak: impl FnOnce(&mut sys::ibv_qp_attr, &mut u32),
) -> CmResult<()> {
    let (mut attr, mut mask) = id.qp_attr(addr, state)?;
    tweak(&mut attr, &mut mask);
    qp.modify(&mut attr, mask, verb)
        .map_err(|source| CmError::Verbs { addr, source })
}

/// RESET → INIT: port, P_Key index and access flags (refreshed in
/// [`to_rts`] once the connection's read depths are known).
pub(crate) fn to_init(id: &CmId, qp: &QueuePair, addr: SocketAddr) -> CmResult<()> {
    step(
        id,
        qp,
        addr,
        sys::ibv_qp_state::IBV_QPS_INIT,
        "ibv_modify_qp(INIT, from rdma_init_qp_attr)",
        |_, _| {},
    )
}

/// INIT → (INIT) → RTR → RTS: the access flags again (the connection
/// manager enables remote reads once read depths are negotiated), the
/// peer's QP number, PSN, path and MTU, then this side's PSN, timeouts
/// and retries. `depths` overrides the read depths when the messages'
/// final values are not yet known to the connection manager (the passive
/// side moves its QP before sending its answer); `min_rnr_timer` replaces
/// the connection manager's 655 ms.
pub(crate) fn to_rts(
    id: &CmId,
    qp: &QueuePair,
    addr: SocketAddr,
    depths: Option<Depths>,
    min_rnr_timer: u8,
) -> CmResult<()> {
    step(
        id,
        qp,
        addr,
        sys::ibv_qp_state::IBV_QPS_INIT,
        "ibv_modify_qp(INIT, from rdma_init_qp_attr)",
        |_, _| {},
    )?;
    let infiniband = qp.port().link_layer != LinkLayer::Ethernet;
    step(
        id,
        qp,
        addr,
        sys::ibv_qp_state::IBV_QPS_RTR,
        "ibv_modify_qp(RTR, from rdma_init_qp_attr)",
        |attr, mask| {
            if infiniband {
                *mask &= !IB_RTR_MASK_WORKAROUND;
            }
            if let Some(d) = depths {
                attr.max_dest_rd_atomic = d.responder_resources;
            }
            attr.min_rnr_timer = min_rnr_timer;
            *mask |= M::IBV_QP_MIN_RNR_TIMER.0;
        },
    )?;
    step(
        id,
        qp,
        addr,
        sys::ibv_qp_state::IBV_QPS_RTS,
        "ibv_modify_qp(RTS, from rdma_init_qp_attr)",
        |attr, _| {
            if let Some(d) = depths {
                attr.max_rd_atomic = d.initiator_depth;
            }
        },
    )
}

/// Moves a QP whose connection failed to the error state, so nothing
/// posted on it stays pending; the connection's error is what matters.
pub(crate) fn abandon(qp: &QueuePair) {
    if let Err(e) = qp.to_error() {
        tracing::debug!("QP {} of a failed connection: {e}", qp.qp_num());
    }
}
