//! What a peer needs to reach our memory: address, length, rkey, and the
//! remote rights the owner granted.

use ferrovia_types::AccessFlags;
use serde::{Deserialize, Serialize};

use crate::error::{MrError, checked_end};

/// A region of a peer's registered memory: its RDMA address, length and
/// remote key, and nothing the peer must keep to itself (no lkey); and
/// the remote rights (read, write, atomics) its registration grants, so a
/// request the owner did not allow is refused with a typed error before
/// it is posted, instead of failing on the wire.
///
/// Small and `Copy`; send it to peers with [`RemoteMemoryRegion::encode`]
/// (a versioned wire form). Every way in validates: `new`, `decode` and
/// serde's `Deserialize` refuse a zero length and an address range that
/// overflows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "Fields", into = "Fields")]
pub struct RemoteMemoryRegion {
    addr: u64,
    len: u64,
    rkey: u32,
    /// Remote rights only (a subset of [`AccessFlags::REMOTE_ANY`]).
    access: AccessFlags,
}

/// What serde reads and writes, checked by [`RemoteMemoryRegion::new`]
/// before it becomes a region: a peer's bytes must not make a value
/// `sub_region`'s arithmetic cannot trust.
#[derive(Serialize, Deserialize)]
struct Fields {
    addr: u64,
    len: u64,
    rkey: u32,
    access: u8,
}

impl TryFrom<Fields> for RemoteMemoryRegion {
    type Error = MrError;

    fn try_from(f: Fields) -> Result<Self, MrError> {
        Ok(RemoteMemoryRegion::new(f.addr, f.len, f.rkey)?.restrict(rights(f.access)?))
    }
}

impl From<RemoteMemoryRegion> for Fields {
    fn from(r: RemoteMemoryRegion) -> Fields {
        Fields {
            addr: r.addr,
            len: r.len,
            rkey: r.rkey,
            access: r.access.bits() as u8,
        }
    }
}

/// The remote rights a byte of the wire form names; other bits are
/// refused.
pub(crate) fn rights(byte: u8) -> Result<AccessFlags, MrError> {
    let flags = AccessFlags::from_bits(u32::from(byte));
    if !AccessFlags::REMOTE_ANY.contains(flags) {
        return Err(MrError::Malformed(format!(
            "access bits {byte:#x} are not remote rights"
        )));
    }
    Ok(flags)
}

impl RemoteMemoryRegion {
    /// A region of `len` bytes at RDMA address `addr` reached with `rkey`.
    /// Zero length and address overflow are refused. Its rights are not
    /// known, so none is refused before posting (the peer's device checks
    /// them); [`RemoteMemoryRegion::restrict`] says what they are.
    pub fn new(addr: u64, len: u64, rkey: u32) -> Result<Self, MrError> {
        checked_end(addr, len)?;
        Ok(RemoteMemoryRegion {
            addr,
            len,
            rkey,
            access: AccessFlags::REMOTE_ANY,
        })
    }

    /// For views, whose fields were checked when the view was made.
    pub(crate) fn from_parts_unchecked(addr: u64, len: u64, rkey: u32) -> Self {
        RemoteMemoryRegion {
            addr,
            len,
            rkey,
            access: AccessFlags::REMOTE_ANY,
        }
    }

    /// The same region with only the remote rights in both its own and
    /// `access` (a descriptor can lose rights, never gain them).
    pub fn restrict(mut self, access: AccessFlags) -> Self {
        self.access = self.access & access & AccessFlags::REMOTE_ANY;
        self
    }

    /// The remote rights the owner granted (all, for a region made with
    /// [`RemoteMemoryRegion::new`] and not restricted).
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// Whether the owner granted `right` (e.g. [`AccessFlags::REMOTE_ATOMIC`]).
    pub fn allows(&self, right: AccessFlags) -> bool {
        self.access.contains(right)
    }

    /// RDMA address of the first byte, in the owner's address space.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: a region has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The `len` bytes at `offset` into this region.
    pub fn sub_region(&self, offset: u64, len: u64) -> Result<RemoteMemoryRegion, MrError> {
        let end = checked_end(offset, len)?;
        if end > self.len {
            return Err(MrError::OutOfRange {
                id: 0,
                offset,
                len,
                size: self.len,
            });
        }
        Ok(RemoteMemoryRegion {
            addr: self.addr + offset,
            len,
            ..*self
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_region_bounds() {
        let r = RemoteMemoryRegion::new(0x1000, 100, 5).unwrap();
        let s = r.sub_region(10, 90).unwrap();
        assert_eq!((s.addr(), s.len(), s.rkey()), (0x1000 + 10, 90, 5));
        assert!(matches!(
            r.sub_region(10, 91),
            Err(MrError::OutOfRange { .. })
        ));
        assert!(matches!(
            r.sub_region(0, 0),
            Err(MrError::ZeroLength { .. })
        ));
        assert!(matches!(
            r.sub_region(u64::MAX, 2),
            Err(MrError::Overflow { .. })
        ));
        assert!(matches!(
            RemoteMemoryRegion::new(u64::MAX, 2, 0),
            Err(MrError::Overflow { .. })
        ));
        assert!(matches!(
            RemoteMemoryRegion::new(1, 0, 0),
            Err(MrError::ZeroLength { .. })
        ));
    }

    #[test]
    fn serde_refuses_what_new_refuses() {
        // postcard's form of the struct is its four fields in order.
        let zero_len = postcard::to_allocvec(&(0x1000u64, 0u64, 7u32, 6u8)).unwrap();
        assert!(postcard::from_bytes::<RemoteMemoryRegion>(&zero_len).is_err());
        let overflow = postcard::to_allocvec(&(u64::MAX - 4, 16u64, 7u32, 6u8)).unwrap();
        assert!(postcard::from_bytes::<RemoteMemoryRegion>(&overflow).is_err());
        let local_bits = postcard::to_allocvec(&(0x1000u64, 64u64, 7u32, 1u8)).unwrap();
        assert!(postcard::from_bytes::<RemoteMemoryRegion>(&local_bits).is_err());
        let good = RemoteMemoryRegion::new(0x1000, 64, 7)
            .unwrap()
            .restrict(AccessFlags::REMOTE_READ);
        let bytes = postcard::to_allocvec(&good).unwrap();
        let back: RemoteMemoryRegion = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, good);
        assert!(back.sub_region(10, 8).is_ok());
        assert_eq!(back.access(), AccessFlags::REMOTE_READ);
    }

    #[test]
    fn rights_only_shrink_and_survive_sub_regions() {
        let r = RemoteMemoryRegion::new(0x1000, 64, 5).unwrap();
        assert_eq!(r.access(), AccessFlags::REMOTE_ANY);
        let w = r.restrict(AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE);
        assert_eq!(w.access(), AccessFlags::REMOTE_WRITE);
        assert!(w.allows(AccessFlags::REMOTE_WRITE) && !w.allows(AccessFlags::REMOTE_ATOMIC));
        assert_eq!(
            w.restrict(AccessFlags::REMOTE_ANY).access(),
            AccessFlags::REMOTE_WRITE
        );
        assert_eq!(
            w.sub_region(8, 8).unwrap().access(),
            AccessFlags::REMOTE_WRITE
        );
    }
}
