//! What a peer needs to connect an RC queue pair to ours.

use serde::{Deserialize, Serialize};

use crate::gid::Gid;
use crate::port::Mtu;

/// The connection parameters of one RC queue pair, exchanged out of band
/// (TCP, a launcher's key-value store, a file) before connecting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    /// QP number.
    pub qpn: u32,
    /// Initial packet sequence number of its send queue (24 bits).
    pub psn: u32,
    /// Port LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// GID used for routing (RoCE, or InfiniBand across subnets).
    pub gid: Gid,
    /// Port number on its device.
    pub port: u8,
    /// Active MTU of its port.
    pub mtu: Mtu,
}
