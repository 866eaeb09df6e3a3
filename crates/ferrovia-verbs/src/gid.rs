//! GIDs, the GID table, and picking the GID to connect with.

use std::fmt;
use std::net::Ipv6Addr;

use serde::{Deserialize, Serialize};

/// A 128-bit global identifier (an IPv6 address on RoCE).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// Whether the GID is all zeroes (an empty table slot).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// Whether it is an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
    pub fn is_ipv4_mapped(&self) -> bool {
        Ipv6Addr::from(self.0).to_ipv4_mapped().is_some()
    }

    /// Whether it is an IPv6 link-local address (`fe80::/10`).
    pub fn is_link_local(&self) -> bool {
        self.0[0] == 0xfe && (self.0[1] & 0xc0) == 0x80
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ipv6Addr::from(self.0).fmt(f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// The type of a GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1 (Ethernet, not routable).
    RoceV1,
    /// RoCE v2 (UDP/IP, routable).
    RoceV2,
    /// A type this version does not know.
    Other(u32),
}

impl GidType {
    pub(crate) fn from_raw(v: u32) -> Self {
        match v {
            0 => GidType::Ib,
            1 => GidType::RoceV1,
            2 => GidType::RoceV2,
            o => GidType::Other(o),
        }
    }
}

/// One entry of a port's GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the table (the `sgid_index` of a connection).
    pub index: u32,
    /// Port number.
    pub port: u8,
    /// Its type.
    pub gid_type: GidType,
}

/// Picks the GID to connect with from a port's table.
///
/// On Ethernet the RoCE v2 IPv4-mapped GID is preferred (it routes over IP
/// and is what soft-RoCE peers reach each other by), then any other RoCE v2
/// GID that is not link-local, then any RoCE v2, then RoCE v1. On
/// InfiniBand it is the first IB GID (index 0 normally).
pub fn pick_gid(entries: &[GidEntry], ethernet: bool) -> Option<GidEntry> {
    let rank = |e: &GidEntry| -> Option<u8> {
        if e.gid.is_zero() {
            return None;
        }
        if !ethernet {
            return (e.gid_type == GidType::Ib).then_some(0);
        }
        match e.gid_type {
            GidType::RoceV2 if e.gid.is_ipv4_mapped() => Some(0),
            GidType::RoceV2 if !e.gid.is_link_local() => Some(1),
            GidType::RoceV2 => Some(2),
            GidType::RoceV1 => Some(3),
            _ => None,
        }
    };
    entries
        .iter()
        .filter_map(|e| rank(e).map(|r| (r, e.index, *e)))
        .min_by_key(|&(r, i, _)| (r, i))
        .map(|(_, _, e)| e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u32, gid: Ipv6Addr, gid_type: GidType) -> GidEntry {
        GidEntry {
            gid: Gid(gid.octets()),
            index,
            port: 1,
            gid_type,
        }
    }

    #[test]
    fn roce_prefers_v2_ipv4_mapped() {
        let table = [
            entry(0, "fe80::1".parse().unwrap(), GidType::RoceV2),
            entry(1, "::ffff:192.168.77.1".parse().unwrap(), GidType::RoceV2),
            entry(2, "fe80::1".parse().unwrap(), GidType::RoceV1),
        ];
        let picked = pick_gid(&table, true).unwrap();
        assert_eq!(picked.index, 1);
        assert!(picked.gid.is_ipv4_mapped());
        assert_eq!(picked.gid.to_string(), "::ffff:192.168.77.1");
    }

    #[test]
    fn roce_falls_back_and_ib_takes_ib() {
        let v1_only = [entry(0, "fe80::1".parse().unwrap(), GidType::RoceV1)];
        assert_eq!(pick_gid(&v1_only, true).unwrap().index, 0);
        let ib = [
            entry(0, "fe80::2".parse().unwrap(), GidType::Ib),
            entry(1, Ipv6Addr::UNSPECIFIED, GidType::Ib),
        ];
        assert_eq!(pick_gid(&ib, false).unwrap().index, 0);
        assert_eq!(pick_gid(&ib, true), None);
        assert_eq!(pick_gid(&[], true), None);
    }

    #[test]
    fn link_local_detection() {
        assert!(Gid("fe80::1".parse::<Ipv6Addr>().unwrap().octets()).is_link_local());
        assert!(!Gid("2001:db8::1".parse::<Ipv6Addr>().unwrap().octets()).is_link_local());
    }
}
