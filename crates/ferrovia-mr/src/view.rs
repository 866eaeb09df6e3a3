//! Views into a registration: where a sub-range lives, locally and for
//! the NIC.

use ferrovia_types::AccessFlags;
use serde::{Deserialize, Serialize};

use crate::error::{MrError, checked_end};
use crate::remote::RemoteMemoryRegion;

/// A view of part of a registered memory region.
///
/// Many views share one large registration (a caching allocator's 16 GiB
/// segment, a huge-page arena). `virtual_addr` is the address the process
/// sees; `rdma_addr` is the address the NIC and peers use, which differs
/// for zero-based registrations: a view at `base + 0x100000` of a segment
/// registered at RDMA address 0 has `rdma_addr == 0x100000`.
///
/// A view is plain data: it does not keep the registration alive. Work
/// requests in `ferrovia-channel` borrow the registration itself. It
/// carries the registration's rights, so the descriptor it makes for a
/// peer ([`MemoryRegionView::remote`]) claims no more than was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemoryRegionView {
    /// The id of the registration the view is into.
    pub id: usize,
    /// Address of the first byte in this process.
    pub virtual_addr: usize,
    /// Address of the first byte for the NIC (and for peers, with `rkey`).
    pub rdma_addr: usize,
    /// Length in bytes.
    pub size: usize,
    /// Local key, for SGEs.
    pub lkey: u32,
    /// Remote key, for peers (meaningful only if remote access was granted).
    pub rkey: u32,
    /// The access rights the registration grants.
    #[serde(with = "access_bits")]
    pub access: AccessFlags,
}

/// `AccessFlags` has no serde form of its own (ferrovia-types has no
/// serde); a view writes its bits.
mod access_bits {
    use ferrovia_types::AccessFlags;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(a: &AccessFlags, s: S) -> Result<S::Ok, S::Error> {
        a.bits().serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<AccessFlags, D::Error> {
        u32::deserialize(d).map(AccessFlags::from_bits)
    }
}

impl MemoryRegionView {
    /// A view with the given fields.
    pub fn new(
        id: usize,
        virtual_addr: usize,
        rdma_addr: usize,
        size: usize,
        lkey: u32,
        rkey: u32,
        access: AccessFlags,
    ) -> Self {
        MemoryRegionView {
            id,
            virtual_addr,
            rdma_addr,
            size,
            lkey,
            rkey,
            access,
        }
    }

    /// The view of `len` bytes at `offset` into this one.
    pub fn sub_view(&self, offset: usize, len: usize) -> Result<MemoryRegionView, MrError> {
        let end = checked_end(offset as u64, len as u64)?;
        if end > self.size as u64 {
            return Err(MrError::OutOfRange {
                id: self.id,
                offset: offset as u64,
                len: len as u64,
                size: self.size as u64,
            });
        }
        Ok(MemoryRegionView {
            virtual_addr: self.virtual_addr + offset,
            rdma_addr: self.rdma_addr + offset,
            size: len,
            ..*self
        })
    }

    /// What a peer needs to reach this view (no lkey), with exactly the
    /// remote rights of its registration. Refused, as
    /// [`Registration::remote`](crate::Registration::remote) refuses it,
    /// unless remote read, write or atomics were granted.
    pub fn remote(&self) -> Result<RemoteMemoryRegion, MrError> {
        if !self.access.grants_remote() {
            return Err(MrError::AccessNotGranted {
                what: "a remote descriptor",
                needed: "REMOTE_READ, REMOTE_WRITE or REMOTE_ATOMIC",
            });
        }
        Ok(RemoteMemoryRegion::from_parts_unchecked(
            self.rdma_addr as u64,
            self.size as u64,
            self.rkey,
        )
        .restrict(self.access))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_views_shift_both_addresses() {
        let rights = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
        let v = MemoryRegionView::new(3, 0x0100_0000, 0, 1 << 30, 11, 22, rights);
        let s = v.sub_view(0x10_0000, 4096).unwrap();
        assert_eq!(s.virtual_addr, 0x0110_0000);
        assert_eq!(s.rdma_addr, 0x10_0000);
        assert_eq!((s.id, s.lkey, s.rkey, s.size), (3, 11, 22, 4096));
        assert_eq!(s.access, rights);
        assert!(matches!(
            v.sub_view(1 << 30, 1),
            Err(MrError::OutOfRange { .. })
        ));
        assert!(matches!(v.sub_view(0, 0), Err(MrError::ZeroLength { .. })));
        assert!(matches!(
            v.sub_view(usize::MAX, 2),
            Err(MrError::Overflow { .. })
        ));
        let r = s.remote().unwrap();
        assert_eq!((r.addr(), r.len(), r.rkey()), (0x10_0000, 4096, 22));
        assert_eq!(r.access(), AccessFlags::REMOTE_READ);
    }

    #[test]
    fn local_only_views_have_no_descriptor() {
        let v = MemoryRegionView::new(1, 0x1000, 0x1000, 64, 1, 2, AccessFlags::LOCAL_WRITE);
        assert!(matches!(v.remote(), Err(MrError::AccessNotGranted { .. })));
    }
}
