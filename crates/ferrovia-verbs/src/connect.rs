//! The RC connection state machine: RESET → INIT → RTR → RTS.

use ferrovia_sys as sys;
use sys::ibv_qp_attr_mask as M;

use crate::endpoint::Endpoint;
use crate::error::{Result, VerbsError};
use crate::port::{LinkLayer, Mtu};
use crate::qp::QueuePair;
use ferrovia_types::AccessFlags;

/// Transport parameters of a connection. The defaults suit a datacenter
/// fabric and soft-RoCE alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// Path MTU; `None` takes the smaller of both ports' active MTUs.
    pub mtu: Option<Mtu>,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout (0..=31; default 14 ≈ 67 ms).
    pub timeout: u8,
    /// Transport retries before `IBV_WC_RETRY_EXC_ERR` (0..=7; default 7).
    pub retry_cnt: u8,
    /// Receiver-not-ready retries (0..=7, 7 = infinite; default 7).
    pub rnr_retry: u8,
    /// Minimal RNR NAK timer code sent to a peer that finds no receive (0..=31; default 12 ≈ 0.64 ms).
    pub min_rnr_timer: u8,
    /// Outstanding RDMA reads/atomics in each direction (clamped to the device; default 16).
    pub max_rd_atomic: u8,
    /// Service level.
    pub sl: u8,
    /// GRH traffic class (RoCE: DSCP/ECN).
    pub traffic_class: u8,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// What the peer may do to our memory through this QP (the MR's own
    /// access flags still apply).
    pub remote_access: AccessFlags,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            mtu: None,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            sl: 0,
            traffic_class: 0,
            hop_limit: 64,
            remote_access: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        }
    }
}

/// Chainable setters, one per field: `ConnectOptions::default().mtu(..)`
/// (the struct is `#[non_exhaustive]`, so other crates cannot write it as
/// a literal).
impl ConnectOptions {
    /// Sets the `mtu` field.
    #[must_use]
    pub fn mtu(mut self, mtu: Option<Mtu>) -> Self {
        self.mtu = mtu;
        self
    }

    /// Sets the `timeout` field.
    #[must_use]
    pub fn timeout(mut self, timeout: u8) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the `retry_cnt` field.
    #[must_use]
    pub fn retry_cnt(mut self, retry_cnt: u8) -> Self {
        self.retry_cnt = retry_cnt;
        self
    }

    /// Sets the `rnr_retry` field.
    #[must_use]
    pub fn rnr_retry(mut self, rnr_retry: u8) -> Self {
        self.rnr_retry = rnr_retry;
        self
    }

    /// Sets the `min_rnr_timer` field.
    #[must_use]
    pub fn min_rnr_timer(mut self, min_rnr_timer: u8) -> Self {
        self.min_rnr_timer = min_rnr_timer;
        self
    }

    /// Sets the `max_rd_atomic` field.
    #[must_use]
    pub fn max_rd_atomic(mut self, max_rd_atomic: u8) -> Self {
        self.max_rd_atomic = max_rd_atomic;
        self
    }

    /// Sets the `sl` field.
    #[must_use]
    pub fn sl(mut self, sl: u8) -> Self {
        self.sl = sl;
        self
    }

    /// Sets the `traffic_class` field.
    #[must_use]
    pub fn traffic_class(mut self, traffic_class: u8) -> Self {
        self.traffic_class = traffic_class;
        self
    }

    /// Sets the `hop_limit` field.
    #[must_use]
    pub fn hop_limit(mut self, hop_limit: u8) -> Self {
        self.hop_limit = hop_limit;
        self
    }

    /// Sets the `remote_access` field.
    #[must_use]
    pub fn remote_access(mut self, remote_access: AccessFlags) -> Self {
        self.remote_access = remote_access;
        self
    }
}

impl ConnectOptions {
    fn validate(&self) -> Result<()> {
        let bad = |what: &str, v: u8, max: u8| {
            Err(VerbsError::InvalidArgument(format!(
                "{what} = {v} is out of range 0..={max}"
            )))
        };
        if self.timeout > 31 {
            return bad("timeout", self.timeout, 31);
        }
        if self.retry_cnt > 7 {
            return bad("retry_cnt", self.retry_cnt, 7);
        }
        if self.rnr_retry > 7 {
            return bad("rnr_retry", self.rnr_retry, 7);
        }
        if self.min_rnr_timer > 31 {
            return bad("min_rnr_timer", self.min_rnr_timer, 31);
        }
        Ok(())
    }
}

impl QueuePair {
    /// Connects this QP to `remote`: INIT, then RTR (addressing the peer by
    /// GID over a GRH on RoCE, by LID on InfiniBand), then RTS.
    pub fn connect(&self, remote: &Endpoint, opts: &ConnectOptions) -> Result<()> {
        opts.validate()?;
        let dev = self.pd().context().query_device()?;
        let clamp = |v: u32| u8::try_from(v.min(u32::from(opts.max_rd_atomic)).max(1)).unwrap_or(1);
        let port = *self.port();

        // RESET -> INIT
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: port.port,
            qp_access_flags: opts.remote_access.bits(),
            ..Default::default()
        };
        let mask = M::IBV_QP_STATE.0
            | M::IBV_QP_PKEY_INDEX.0
            | M::IBV_QP_PORT.0
            | M::IBV_QP_ACCESS_FLAGS.0;
        self.modify(&mut a, mask, "ibv_modify_qp(INIT)")?;

        // INIT -> RTR
        let mtu = opts.mtu.unwrap_or(port.active_mtu.min(remote.mtu));
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_RTR,
            path_mtu: sys::ibv_mtu(mtu as u32),
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn & 0x00ff_ffff,
            max_dest_rd_atomic: clamp(dev.max_qp_rd_atom),
            min_rnr_timer: opts.min_rnr_timer,
            ..Default::default()
        };
        a.ah_attr.port_num = port.port;
        a.ah_attr.sl = opts.sl;
        let global =
            port.link_layer == LinkLayer::Ethernet || (remote.lid == 0 && !remote.gid.is_zero());
        if global {
            let local = self.gid().ok_or_else(|| VerbsError::NoUsableGid {
                device: self.pd().context().name().to_owned(),
                port: port.port,
            })?;
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = remote.gid.0;
            a.ah_attr.grh.sgid_index = u8::try_from(local.index).map_err(|_| {
                VerbsError::InvalidArgument(format!("GID index {} does not fit a u8", local.index))
            })?;
            a.ah_attr.grh.hop_limit = opts.hop_limit;
            a.ah_attr.grh.traffic_class = opts.traffic_class;
        } else {
            a.ah_attr.dlid = remote.lid;
        }
        let mask = M::IBV_QP_STATE.0
            | M::IBV_QP_AV.0
            | M::IBV_QP_PATH_MTU.0
            | M::IBV_QP_DEST_QPN.0
            | M::IBV_QP_RQ_PSN.0
            | M::IBV_QP_MAX_DEST_RD_ATOMIC.0
            | M::IBV_QP_MIN_RNR_TIMER.0;
        self.modify(&mut a, mask, "ibv_modify_qp(RTR)")?;

        // RTR -> RTS
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_RTS,
            timeout: opts.timeout,
            retry_cnt: opts.retry_cnt,
            rnr_retry: opts.rnr_retry,
            sq_psn: self.local_psn(),
            max_rd_atomic: clamp(dev.max_qp_init_rd_atom),
            ..Default::default()
        };
        let mask = M::IBV_QP_STATE.0
            | M::IBV_QP_TIMEOUT.0
            | M::IBV_QP_RETRY_CNT.0
            | M::IBV_QP_RNR_RETRY.0
            | M::IBV_QP_SQ_PSN.0
            | M::IBV_QP_MAX_QP_RD_ATOMIC.0;
        self.modify(&mut a, mask, "ibv_modify_qp(RTS)")?;
        tracing::debug!(
            "QP {} connected to QP {} ({}, path MTU {})",
            self.qp_num(),
            remote.qpn,
            if global { "GRH/GID" } else { "LID" },
            mtu.bytes()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        assert!(ConnectOptions::default().validate().is_ok());
        let o = ConnectOptions {
            retry_cnt: 8,
            ..Default::default()
        };
        let e = o.validate().unwrap_err().to_string();
        assert!(e.contains("retry_cnt = 8"), "{e}");
        let o = ConnectOptions {
            timeout: 32,
            ..Default::default()
        };
        assert!(matches!(o.validate(), Err(VerbsError::InvalidArgument(_))));
    }
}
