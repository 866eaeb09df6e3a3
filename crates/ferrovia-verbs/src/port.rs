//! Port attributes: state, MTU, link layer, LID.

use serde::{Deserialize, Serialize};

/// The logical state of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PortState {
    /// Link down.
    Down,
    /// Link up, waiting for the subnet manager.
    Init,
    /// Configured but not yet active.
    Armed,
    /// Ready for traffic.
    Active,
    /// Active, deferred.
    ActiveDefer,
    /// Any other value the driver reported.
    Other(u32),
}

impl PortState {
    pub(crate) fn from_raw(v: u32) -> Self {
        match v {
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            o => PortState::Other(o),
        }
    }
}

/// The link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// InfiniBand: addressed by LID.
    InfiniBand,
    /// Ethernet (RoCE, soft-RoCE): addressed by GID, every packet has a GRH.
    Ethernet,
    /// Not reported (treated as InfiniBand, as rdma-core does).
    Unspecified,
}

/// Path MTU of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// The MTU in bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    pub(crate) fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }
}

/// What `ibv_query_port` reports, in Rust types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttributes {
    /// Port number (1-based).
    pub port: u8,
    /// Logical state.
    pub state: PortState,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU currently active.
    pub active_mtu: Mtu,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Local identifier (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// Number of GID table entries.
    pub gid_table_len: u32,
    /// Largest message the port sends.
    pub max_msg_size: u32,
}

impl PortAttributes {
    /// Whether the port can carry traffic.
    pub fn is_active(&self) -> bool {
        matches!(self.state, PortState::Active | PortState::ActiveDefer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_bytes() {
        assert_eq!(Mtu::Mtu256.bytes(), 256);
        assert_eq!(Mtu::Mtu1024.bytes(), 1024);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(Mtu::from_raw(3), Some(Mtu::Mtu1024));
        assert_eq!(Mtu::from_raw(9), None);
        assert!(Mtu::Mtu1024 < Mtu::Mtu4096);
    }
}
