//! Datagram (UD) queue pairs: one queue pair reaches every peer, each
//! message names its destination through an address handle made from the
//! peer's GID (or LID), and carries at most one path MTU. A receive buffer
//! begins with 40 bytes the device fills with the packet's global route
//! header (or leaves undefined when the packet had none: `IBV_WC_GRH`).

use std::ptr::NonNull;
use std::sync::Arc;

use ferrovia_sys as sys;
use serde::{Deserialize, Serialize};
use sys::ibv_qp_attr_mask as M;

use crate::error::{Result, VerbsError, lib, loaded, null_error};
use crate::gid::Gid;
use crate::pd::{PdInner, ProtectionDomain};
use crate::qp::{QueuePair, QueuePairBuilder};

/// The bytes at the start of every datagram receive buffer that hold the
/// global route header, before the message.
pub const GRH_BYTES: usize = 40;

/// The default Q_Key of ferrovia's datagram queue pairs (bit 31 clear: a
/// Q_Key with it set is privileged).
pub const DEFAULT_QKEY: u32 = 0x1f3a_0d6b;

/// What a peer needs to send datagrams to one of our UD queue pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DatagramAddress {
    /// QP number.
    pub qpn: u32,
    /// The Q_Key the queue pair takes: a message with another is dropped.
    pub qkey: u32,
    /// Port LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// GID (RoCE, or InfiniBand across subnets).
    pub gid: Gid,
    /// Largest message it takes (its port's active MTU, at most).
    pub max_message: u32,
}

impl QueuePairBuilder<'_> {
    /// Builds a datagram (UD) queue pair instead of an RC one; ready it
    /// with [`QueuePair::ready_datagram`].
    pub fn datagram(mut self) -> Self {
        self.qp_type = sys::IBV_QPT_UD;
        self
    }
}

impl QueuePair {
    /// Moves a datagram queue pair through INIT (port, P_Key index 0,
    /// `qkey`), RTR and RTS: it then sends and takes messages.
    pub fn ready_datagram(&self, qkey: u32) -> Result<()> {
        if qkey & 0x8000_0000 != 0 {
            return Err(VerbsError::InvalidArgument(format!(
                "Q_Key {qkey:#x} has bit 31 set (a privileged Q_Key)"
            )));
        }
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: self.port().port,
            qkey,
            ..Default::default()
        };
        let mask = M::IBV_QP_STATE.0 | M::IBV_QP_PKEY_INDEX.0 | M::IBV_QP_PORT.0 | M::IBV_QP_QKEY.0;
        self.modify(&mut a, mask, "ibv_modify_qp(UD INIT)")?;
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_RTR,
            ..Default::default()
        };
        self.modify(&mut a, M::IBV_QP_STATE.0, "ibv_modify_qp(UD RTR)")?;
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::ibv_qp_state::IBV_QPS_RTS,
            sq_psn: self.local_psn(),
            ..Default::default()
        };
        self.modify(
            &mut a,
            M::IBV_QP_STATE.0 | M::IBV_QP_SQ_PSN.0,
            "ibv_modify_qp(UD RTS)",
        )
    }

    /// What a peer needs to send datagrams here, with `qkey` (the one
    /// the queue pair was readied with) and messages of at most
    /// `max_message` bytes (clamped to the port's active MTU).
    pub fn datagram_address(&self, qkey: u32, max_message: u32) -> DatagramAddress {
        let e = self.endpoint();
        DatagramAddress {
            qpn: e.qpn,
            qkey,
            lid: e.lid,
            gid: e.gid,
            max_message: max_message.min(e.mtu.bytes()),
        }
    }
}

/// An address handle (`struct ibv_ah`): the route to one peer's port,
/// from its GID over a global route header (RoCE), else its LID.
pub struct AddressHandle {
    ah: NonNull<sys::ibv_ah>,
    _pd: Arc<PdInner>,
}

// SAFETY: an address handle is immutable once created; it is destroyed
// once, in Drop.
unsafe impl Send for AddressHandle {}
// SAFETY: as above.
unsafe impl Sync for AddressHandle {}

impl AddressHandle {
    /// The route from `qp`'s port (and GID) to `to`, in `pd`.
    pub fn new(pd: &ProtectionDomain, qp: &QueuePair, to: &DatagramAddress) -> Result<Self> {
        let mut a = sys::ibv_ah_attr {
            dlid: to.lid,
            port_num: qp.port().port,
            ..Default::default()
        };
        if let Some(local) = qp.gid() {
            a.is_global = 1;
            a.grh.dgid.raw = to.gid.0;
            a.grh.sgid_index = u8::try_from(local.index).map_err(|_| {
                VerbsError::InvalidArgument(format!("GID index {} does not fit a u8", local.index))
            })?;
            a.grh.hop_limit = 64;
        }
        // SAFETY: a live PD; the attributes are initialised.
        let ah = unsafe { lib()?.ibv_create_ah(pd.as_raw(), &mut a) };
        let ah = NonNull::new(ah).ok_or_else(|| null_error("ibv_create_ah"))?;
        Ok(AddressHandle {
            ah,
            _pd: pd.inner.clone(),
        })
    }

    /// The raw handle, for `ferrovia-sys` calls.
    pub fn as_raw(&self) -> *mut sys::ibv_ah {
        self.ah.as_ptr()
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once here; requests naming it
        // were waited for by its owner (it lives as long as they do).
        unsafe { loaded().map(|l| l.ibv_destroy_ah(self.ah.as_ptr())) };
    }
}

impl std::fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressHandle").finish_non_exhaustive()
    }
}

/// Where a datagram came from, read from its receive buffer's first
/// [`GRH_BYTES`]: the source GID of an InfiniBand/IPv6 global route header,
/// or, on RoCE v2 over IPv4, the IPv4-mapped GID of the IPv4 header's
/// source address (which the device puts in the header's last 20 bytes).
/// `None` when the completion says there was no header (`has_grh` false:
/// those bytes are then undefined) or the bytes are neither.
///
/// Which of the two it is, as libibverbs decides it: a header whose
/// version is not 6 is IPv4 if its last 20 bytes say so; one whose
/// version is 6 is IPv4 only if those bytes are a 20-byte IPv4 header
/// with a right checksum (the IPv6 header's GID bytes may look like an
/// IPv4 version by chance, so the version nibble alone would misread
/// one peer in sixteen).
pub fn source_gid(header: &[u8; GRH_BYTES], has_grh: bool) -> Option<Gid> {
    if !has_grh {
        return None;
    }
    let ip4 = &header[20..40];
    let ipv6 = header[0] >> 4 == 6;
    let ipv4 = if ipv6 {
        ip4[0] == 0x45 && ipv4_checksum_holds(ip4)
    } else {
        ip4[0] >> 4 == 4
    };
    if ipv4 {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&ip4[12..16]);
        return Some(Gid(g));
    }
    if ipv6 {
        let mut g = [0u8; 16];
        g.copy_from_slice(&header[8..24]);
        return Some(Gid(g));
    }
    None
}

/// Whether a 20-byte IPv4 header's checksum is right: its ones'
/// complement sum over 16-bit words, the checksum included, is 0xffff.
fn ipv4_checksum_holds(h: &[u8]) -> bool {
    let mut sum: u32 = h
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_of_a_header_is_read_for_ipv4_and_ipv6_and_never_guessed() {
        let mut h = [0u8; GRH_BYTES];
        h[20] = 0x45; // IPv4, 20-byte header
        h[32..36].copy_from_slice(&[192, 168, 77, 1]);
        let g = source_gid(&h, true).unwrap();
        assert!(g.is_ipv4_mapped());
        assert_eq!(&g.0[12..], &[192, 168, 77, 1]);
        assert_eq!(
            source_gid(&h, false),
            None,
            "no GRH: the bytes are undefined"
        );
        let mut h = [0u8; GRH_BYTES];
        h[0] = 0x60;
        h[8..24].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(source_gid(&h, true).unwrap().0[15], 8);
        assert_eq!(source_gid(&[0u8; GRH_BYTES], true), None);
    }

    /// An IPv4 header as a device writes it, with its checksum.
    fn ipv4_header(src: [u8; 4]) -> [u8; 20] {
        let mut h = [0u8; 20];
        h[0] = 0x45;
        h[3] = 60;
        h[8] = 64;
        h[9] = 17;
        h[12..16].copy_from_slice(&src);
        h[16..20].copy_from_slice(&[192, 168, 77, 2]);
        let mut sum: u32 = h
            .chunks_exact(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        h
    }

    #[test]
    fn an_ipv6_source_whose_gid_looks_like_ipv4_is_still_ipv6() {
        // GID byte 12 lands on header byte 20: 0x4_ there is an IPv4
        // version nibble by chance, and the checksum says it is not one.
        let gid = [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0x45, 0x33, 0x44, 0x55,
        ];
        let mut h = [0u8; GRH_BYTES];
        h[0] = 0x60;
        h[8..24].copy_from_slice(&gid);
        assert_eq!(source_gid(&h, true), Some(Gid(gid)));
    }

    #[test]
    fn an_ipv4_header_is_believed_over_stale_ipv6_bytes_when_its_checksum_holds() {
        let mut h = [0u8; GRH_BYTES];
        h[0] = 0x60; // left in the slot by an earlier IPv6 datagram
        h[20..].copy_from_slice(&ipv4_header([10, 0, 0, 7]));
        let g = source_gid(&h, true).unwrap();
        assert!(g.is_ipv4_mapped());
        assert_eq!(&g.0[12..], &[10, 0, 0, 7]);
        assert!(ipv4_checksum_holds(&h[20..]));
    }
}
