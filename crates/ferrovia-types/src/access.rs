//! Memory and QP access flags.

use std::ops::{BitAnd, BitOr, BitOrAssign};

/// Access rights of a memory region (the bits of `enum ibv_access_flags`).
///
/// Local read is always granted. Remote rights let any peer holding the
/// rkey touch the memory: grant them only where needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessFlags(u32);

impl AccessFlags {
    /// No rights beyond local read (gather/send only).
    pub const NONE: AccessFlags = AccessFlags(0);
    /// The NIC may write the memory locally (receives, read responses).
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(1);
    /// Peers may RDMA-write the memory.
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(2);
    /// Peers may RDMA-read the memory.
    pub const REMOTE_READ: AccessFlags = AccessFlags(4);
    /// Peers may run atomics on the memory.
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(8);
    /// Memory windows may be bound over the memory (`IBV_ACCESS_MW_BIND`):
    /// a window grants peers at most the registration's own remote rights.
    pub const MW_BIND: AccessFlags = AccessFlags(0x10);
    /// Registered on demand (`IBV_ACCESS_ON_DEMAND`): pages are mapped
    /// when the device touches them, not pinned at registration.
    pub const ON_DEMAND: AccessFlags = AccessFlags(0x40);
    /// Local write plus remote read, write and atomics.
    pub const ALL_REMOTE: AccessFlags = AccessFlags(
        Self::LOCAL_WRITE.0 | Self::REMOTE_WRITE.0 | Self::REMOTE_READ.0 | Self::REMOTE_ATOMIC.0,
    );

    /// Every remote right: read, write and atomics.
    pub const REMOTE_ANY: AccessFlags =
        AccessFlags(Self::REMOTE_WRITE.0 | Self::REMOTE_READ.0 | Self::REMOTE_ATOMIC.0);

    /// The raw bit mask.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Flags from a raw mask (as read from the wire); unknown bits are
    /// kept, and grant nothing this crate checks.
    #[inline]
    pub fn from_bits(bits: u32) -> AccessFlags {
        AccessFlags(bits)
    }

    /// Whether every right in `other` is granted.
    #[inline]
    pub fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any remote right is granted.
    pub fn grants_remote(self) -> bool {
        self.0 & Self::REMOTE_ANY.0 != 0
    }
}

impl BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | rhs.0)
    }
}

/// The rights by name, `|`-separated (`none` for none).
impl std::fmt::Display for AccessFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = [
            (Self::LOCAL_WRITE, "LOCAL_WRITE"),
            (Self::REMOTE_WRITE, "REMOTE_WRITE"),
            (Self::REMOTE_READ, "REMOTE_READ"),
            (Self::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
            (Self::MW_BIND, "MW_BIND"),
            (Self::ON_DEMAND, "ON_DEMAND"),
        ];
        let mut first = true;
        for (flag, name) in names {
            if self.contains(flag) && flag.0 != 0 {
                f.write_str(if first { "" } else { " | " })?;
                f.write_str(name)?;
                first = false;
            }
        }
        let unknown = self.0 & !(Self::ALL_REMOTE.0 | Self::MW_BIND.0 | Self::ON_DEMAND.0);
        if unknown != 0 {
            write!(f, "{}{unknown:#x}", if first { "" } else { " | " })?;
            first = false;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

impl BitAnd for AccessFlags {
    type Output = AccessFlags;
    fn bitand(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 & rhs.0)
    }
}

impl BitOrAssign for AccessFlags {
    fn bitor_assign(&mut self, rhs: AccessFlags) {
        self.0 |= rhs.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_combine() {
        let f = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
        assert!(f.contains(AccessFlags::LOCAL_WRITE));
        assert!(!f.contains(AccessFlags::REMOTE_WRITE));
        assert!(f.grants_remote());
        assert!(!AccessFlags::LOCAL_WRITE.grants_remote());
        assert!(AccessFlags::ALL_REMOTE.contains(f));
        assert_eq!(f.to_string(), "LOCAL_WRITE | REMOTE_READ");
        assert_eq!(AccessFlags::NONE.to_string(), "none");
        assert_eq!(AccessFlags::from_bits(0x40).to_string(), "ON_DEMAND");
        assert_eq!(
            (AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND).to_string(),
            "LOCAL_WRITE | MW_BIND"
        );
        assert_eq!(AccessFlags::from_bits(0x100).to_string(), "0x100");
    }
}
