//! What a connection asks for and offers: RDMA read depths, retries, and
//! the private data each message carries, with the transport's limits.

use std::net::SocketAddr;

use ferrovia_sys as sys;

use crate::cm::error::{CmError, CmResult};
use crate::context::DeviceAttributes;

/// Private data a connect request carries on IB and RoCE (the REQ's 92
/// bytes less the RDMA CM's 36-byte header).
pub const CONNECT_PRIVATE_DATA_MAX: usize = 56;
/// Private data an accept carries on IB and RoCE (the REP's).
pub const ACCEPT_PRIVATE_DATA_MAX: usize = 196;
/// Private data a reject carries on IB and RoCE (the REJ's).
pub const REJECT_PRIVATE_DATA_MAX: usize = 148;

/// Transport parameters negotiated through the connection manager. The
/// defaults suit soft-RoCE and a datacenter fabric alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CmParams {
    /// RDMA reads and atomics the peer may have outstanding towards this
    /// side (clamped to the device and, when accepting, to what the peer
    /// asked for; default 16).
    pub responder_resources: u8,
    /// RDMA reads and atomics this side may have outstanding towards the
    /// peer (clamped likewise; default 16).
    pub initiator_depth: u8,
    /// Transport retries before a send fails with `IBV_WC_RETRY_EXC_ERR`
    /// (0..=7, set by the connecting side; default 7).
    pub retry_count: u8,
    /// Receiver-not-ready retries the peer makes towards this side
    /// (0..=7, 7 = infinite; default 7).
    pub rnr_retry_count: u8,
    /// The RNR NAK timer code this side's QP sends to a peer that finds no
    /// receive posted (0..=31; default 12 ≈ 0.64 ms; the connection
    /// manager's own choice, 0, is 655 ms).
    pub min_rnr_timer: u8,
}

impl Default for CmParams {
    fn default() -> Self {
        CmParams {
            responder_resources: 16,
            initiator_depth: 16,
            retry_count: 7,
            rnr_retry_count: 7,
            min_rnr_timer: 12,
        }
    }
}

/// Chainable setters, one per field: `CmParams::default().responder_resources(..)`
/// (the struct is `#[non_exhaustive]`, so other crates cannot write it as
/// a literal).
impl CmParams {
    /// Sets the `responder_resources` field.
    #[must_use]
    pub fn responder_resources(mut self, responder_resources: u8) -> Self {
        self.responder_resources = responder_resources;
        self
    }

    /// Sets the `initiator_depth` field.
    #[must_use]
    pub fn initiator_depth(mut self, initiator_depth: u8) -> Self {
        self.initiator_depth = initiator_depth;
        self
    }

    /// Sets the `retry_count` field.
    #[must_use]
    pub fn retry_count(mut self, retry_count: u8) -> Self {
        self.retry_count = retry_count;
        self
    }

    /// Sets the `rnr_retry_count` field.
    #[must_use]
    pub fn rnr_retry_count(mut self, rnr_retry_count: u8) -> Self {
        self.rnr_retry_count = rnr_retry_count;
        self
    }

    /// Sets the `min_rnr_timer` field.
    #[must_use]
    pub fn min_rnr_timer(mut self, min_rnr_timer: u8) -> Self {
        self.min_rnr_timer = min_rnr_timer;
        self
    }
}

/// The RDMA read depths of one connection, as offered in its messages
/// and set on its QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Depths {
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
}

impl CmParams {
    pub(crate) fn validate(&self, addr: SocketAddr) -> CmResult<()> {
        let bad = |what: &str, v: u8, max: u8| CmError::InvalidArgument {
            addr,
            reason: format!("CmParams::{what} = {v} is out of range 0..={max}"),
        };
        if self.retry_count > 7 {
            return Err(bad("retry_count", self.retry_count, 7));
        }
        if self.rnr_retry_count > 7 {
            return Err(bad("rnr_retry_count", self.rnr_retry_count, 7));
        }
        if self.min_rnr_timer > 31 {
            return Err(bad("min_rnr_timer", self.min_rnr_timer, 31));
        }
        Ok(())
    }

    /// What a connecting side offers: its wishes, within the device.
    pub(crate) fn connect_depths(&self, dev: &DeviceAttributes) -> Depths {
        Depths {
            responder_resources: clamp(self.responder_resources, dev.max_qp_rd_atom),
            initiator_depth: clamp(self.initiator_depth, dev.max_qp_init_rd_atom),
        }
    }

    /// What an accepting side answers to a request whose sender can issue
    /// `peer_initiator` reads and serve `peer_responder`: each direction
    /// is the smaller of both ends.
    pub(crate) fn accept_depths(
        &self,
        dev: &DeviceAttributes,
        peer_initiator: u8,
        peer_responder: u8,
    ) -> Depths {
        let mine = self.connect_depths(dev);
        Depths {
            responder_resources: mine.responder_resources.min(peer_initiator),
            initiator_depth: mine.initiator_depth.min(peer_responder),
        }
    }

    /// The `struct rdma_conn_param` of a connect or accept. The private
    /// data pointer borrows `data`, which must outlive the call using it.
    pub(crate) fn conn_param(
        &self,
        depths: Depths,
        qp_num: u32,
        data: &[u8],
    ) -> sys::rdma_conn_param {
        sys::rdma_conn_param {
            private_data: if data.is_empty() {
                std::ptr::null()
            } else {
                data.as_ptr().cast()
            },
            // Callers checked the length against a limit below 256.
            private_data_len: u8::try_from(data.len()).unwrap_or(u8::MAX),
            responder_resources: depths.responder_resources,
            initiator_depth: depths.initiator_depth,
            flow_control: 1,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            srq: 0,
            qp_num,
        }
    }
}

fn clamp(wanted: u8, device: u32) -> u8 {
    u8::try_from(u32::from(wanted).min(device)).unwrap_or(u8::MAX)
}

/// Checks `data` against the limit of the message `what` carries it in,
/// before anything is sent.
pub(crate) fn check_private_data(
    what: &'static str,
    addr: SocketAddr,
    data: &[u8],
) -> CmResult<()> {
    let max = match what {
        "rdma_connect" => CONNECT_PRIVATE_DATA_MAX,
        "rdma_accept" => ACCEPT_PRIVATE_DATA_MAX,
        _ => REJECT_PRIVATE_DATA_MAX,
    };
    if data.len() > max {
        return Err(CmError::PrivateDataTooLong {
            what,
            addr,
            len: data.len(),
            max,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(rd: u32, init: u32) -> DeviceAttributes {
        DeviceAttributes {
            fw_ver: String::new(),
            node_guid: 0,
            max_mr_size: 0,
            max_qp: 0,
            max_qp_wr: 0,
            max_sge: 0,
            max_cqe: 0,
            max_mr: 0,
            max_qp_rd_atom: rd,
            max_qp_init_rd_atom: init,
            phys_port_cnt: 1,
            atomic_cap: crate::AtomicCap::None,
            max_srq: 0,
            max_srq_wr: 0,
        }
    }

    #[test]
    fn private_data_limits_are_checked_per_message() {
        let addr: SocketAddr = "10.0.0.1:1".parse().unwrap();
        assert!(check_private_data("rdma_connect", addr, &[0; 56]).is_ok());
        let e = check_private_data("rdma_connect", addr, &[0; 57]).unwrap_err();
        assert!(matches!(
            e,
            CmError::PrivateDataTooLong {
                len: 57,
                max: 56,
                ..
            }
        ));
        assert!(e.to_string().contains("10.0.0.1:1"), "{e}");
        assert!(check_private_data("rdma_accept", addr, &[0; 196]).is_ok());
        assert!(check_private_data("rdma_accept", addr, &[0; 197]).is_err());
        assert!(check_private_data("rdma_reject", addr, &[0; 148]).is_ok());
        assert!(check_private_data("rdma_reject", addr, &[0; 149]).is_err());
    }

    #[test]
    fn depths_are_the_smaller_of_wish_device_and_peer() {
        let p = CmParams::default();
        let d = p.connect_depths(&dev(128, 4));
        assert_eq!((d.responder_resources, d.initiator_depth), (16, 4));
        let d = p.accept_depths(&dev(128, 128), 1, 2);
        assert_eq!((d.responder_resources, d.initiator_depth), (1, 2));
        let addr: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let bad = CmParams {
            rnr_retry_count: 8,
            ..Default::default()
        };
        assert!(bad.validate(addr).is_err());
    }
}
