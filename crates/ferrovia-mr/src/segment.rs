//! One registered segment and the memory it may own.

use std::alloc::Layout;

use ferrovia_types::AccessFlags;

use crate::error::MrError;

use crate::registrar::RegisteredKeys;

use crate::view::MemoryRegionView;

/// Memory a segment owns, held as a raw pointer so that access through
/// `RegisteredBuffer` never aliases a live `Box`.
pub(crate) struct OwnedMemory {
    ptr: *mut u8,
    len: usize,
    origin: Origin,
}

/// Where owned memory came from, so it is freed the same way.
enum Origin {
    /// A handle to another registry's registration of the same bytes
    /// (this is its alias): held so they stay allocated and registered
    /// there, never freed here.
    Alias(#[allow(dead_code)] crate::Registration<'static>),
    /// `std::alloc` with this layout.
    Alloc(Layout),
    /// A `Box<[u8]>`.
    Boxed,
    /// A registrar's allocation; dropping the owner frees it.
    Registrar(#[allow(dead_code)] Box<dyn Send + Sync>),
}

impl OwnedMemory {
    pub(crate) fn from_box(buf: Box<[u8]>) -> OwnedMemory {
        let len = buf.len();
        OwnedMemory {
            ptr: Box::into_raw(buf).cast(),
            len,
            origin: Origin::Boxed,
        }
    }

    pub(crate) fn from_allocation(a: crate::registrar::Allocation) -> OwnedMemory {
        let (ptr, len, owner) = a.into_parts();
        OwnedMemory {
            ptr: ptr.as_ptr(),
            len,
            origin: Origin::Registrar(owner),
        }
    }

    /// `len` zeroed bytes aligned to the page size.
    pub(crate) fn zeroed_page_aligned(len: usize) -> Result<OwnedMemory, MrError> {
        if len == 0 {
            return Err(MrError::ZeroLength { addr: 0 });
        }
        let layout = Layout::from_size_align(len, ferrovia_types::page_size()).map_err(|_| {
            MrError::Overflow {
                addr: 0,
                len: len as u64,
            }
        })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Ok(OwnedMemory {
            ptr,
            len,
            origin: Origin::Alloc(layout),
        })
    }

    /// The bytes of `of`, kept allocated by holding it (an alias
    /// registration's memory: `of` frees them, after every alias).
    pub(crate) fn alias(of: crate::Registration<'static>, ptr: *mut u8, len: usize) -> OwnedMemory {
        OwnedMemory {
            ptr,
            len,
            origin: Origin::Alias(of),
        }
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for OwnedMemory {
    fn drop(&mut self) {
        match self.origin {
            // SAFETY: allocated in zeroed_page_aligned with this layout.
            Origin::Alloc(layout) => unsafe { std::alloc::dealloc(self.ptr, layout) },
            // SAFETY: `ptr`/`len` came from Box::into_raw of a Box<[u8]> and
            // are reconstituted exactly once.
            Origin::Boxed => drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len))
            }),
            // The owner field drops after this and frees the memory.
            Origin::Registrar(_) => {}
            // The original segment frees them when its last holder goes.
            Origin::Alias(_) => {}
        }
    }
}

/// A registered segment. Field order matters: the keys are dropped (deregistered)
/// before owned memory is freed, so the NIC never holds a key to freed memory.
pub(crate) struct Segment {
    /// Held only to deregister when the segment drops.
    pub(crate) _keys: Box<dyn RegisteredKeys>,
    pub(crate) owned: Option<OwnedMemory>,
    /// Copied out of `keys` so lookups make no dynamic calls.
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    pub(crate) access: AccessFlags,
    pub(crate) id: usize,
    pub(crate) addr: usize,
    pub(crate) len: usize,
    /// The bytes from `addr` that `Shared` memory's atomics may reach:
    /// `len`, or for `MrRegistry::alloc`, `len` rounded up to whole words
    /// (its padding, allocated and registered nowhere else).
    pub(crate) span: usize,
    pub(crate) rdma_base: u64,
    /// Device memory (a dma-buf): `addr` is the device address views are
    /// looked up by, not memory of this process.
    pub(crate) device: bool,
}

// SAFETY: the raw pointer of OwnedMemory is only dereferenced by the unique
// RegisteredBuffer that wraps the segment; the segment itself only frees it.
unsafe impl Send for Segment {}
// SAFETY: as above; shared access reads only immutable metadata.
unsafe impl Sync for Segment {}

impl Segment {
    pub(crate) fn end(&self) -> usize {
        self.addr + self.len
    }

    pub(crate) fn covers(&self, addr: usize, end: usize) -> bool {
        self.addr <= addr && end <= self.end()
    }

    /// The view of `[addr, addr+len)`, which the caller checked is covered.
    pub(crate) fn view_unchecked(&self, addr: usize, len: usize) -> MemoryRegionView {
        let offset = addr - self.addr;
        MemoryRegionView {
            id: self.id,
            virtual_addr: addr,
            rdma_addr: (self.rdma_base as usize).wrapping_add(offset),
            size: len,
            lkey: self.lkey,
            rkey: self.rkey,
            access: self.access,
        }
    }
}
