//! What a peer needs to reach our memory: address, length, rkey.

use serde::{Deserialize, Serialize};

use crate::error::{MrError, checked_end};

/// A region of a peer's registered memory: its RDMA address, length and
/// remote key, and nothing the peer must keep to itself (no lkey).
///
/// Small and `Copy`; send it to peers with [`RemoteMemoryRegion::encode`]
/// (a versioned postcard wire form). Every way in validates: `new`,
/// `decode` and serde's `Deserialize` refuse a zero length and an address
/// range that overflows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "Fields")]
pub struct RemoteMemoryRegion {
    addr: u64,
    len: u64,
    rkey: u32,
}

/// What serde reads, checked by [`RemoteMemoryRegion::new`] before it
/// becomes a region: a peer's bytes must not make a value `sub_region`'s
/// arithmetic cannot trust. Same fields, so the serialized form is
/// unchanged.
#[derive(Deserialize)]
struct Fields {
    addr: u64,
    len: u64,
    rkey: u32,
}

impl TryFrom<Fields> for RemoteMemoryRegion {
    type Error = MrError;

    fn try_from(f: Fields) -> Result<Self, MrError> {
        RemoteMemoryRegion::new(f.addr, f.len, f.rkey)
    }
}

impl RemoteMemoryRegion {
    /// A region of `len` bytes at RDMA address `addr` reached with `rkey`.
    /// Zero length and address overflow are refused.
    pub fn new(addr: u64, len: u64, rkey: u32) -> Result<Self, MrError> {
        checked_end(addr, len)?;
        Ok(RemoteMemoryRegion { addr, len, rkey })
    }

    /// For views, whose fields were checked when the view was made.
    pub(crate) fn from_parts_unchecked(addr: u64, len: u64, rkey: u32) -> Self {
        RemoteMemoryRegion { addr, len, rkey }
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
            rkey: self.rkey,
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
        // postcard's form of the struct is its three fields in order.
        let zero_len = postcard::to_allocvec(&(0x1000u64, 0u64, 7u32)).unwrap();
        assert!(postcard::from_bytes::<RemoteMemoryRegion>(&zero_len).is_err());
        let overflow = postcard::to_allocvec(&(u64::MAX - 4, 16u64, 7u32)).unwrap();
        assert!(postcard::from_bytes::<RemoteMemoryRegion>(&overflow).is_err());
        let good = RemoteMemoryRegion::new(0x1000, 64, 7).unwrap();
        let bytes = postcard::to_allocvec(&good).unwrap();
        let back: RemoteMemoryRegion = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, good);
        assert!(back.sub_region(10, 8).is_ok());
    }
}
