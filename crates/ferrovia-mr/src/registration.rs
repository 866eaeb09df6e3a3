//! A handle to a live registration.

use std::marker::PhantomData;
use std::sync::Arc;

use ferrovia_types::AccessFlags;

use crate::error::{MrError, checked_end};
use crate::registry_state::RegistryInner;
use crate::remote::RemoteMemoryRegion;
use crate::segment::Segment;
use crate::view::MemoryRegionView;

/// A handle to a registration, valid for `'a` (the borrow of the memory;
/// `'static` for owned or raw registrations). Clones share the
/// registration, which is deregistered when the last handle drops.
pub struct Registration<'a> {
    pub(crate) seg: Arc<Segment>,
    pub(crate) registry: Arc<RegistryInner>,
    _memory: PhantomData<&'a ()>,
}

impl Registration<'_> {
    pub(crate) fn new<'a>(seg: Arc<Segment>, registry: Arc<RegistryInner>) -> Registration<'a> {
        Registration {
            seg,
            registry,
            _memory: PhantomData,
        }
    }

    /// Whether `other` is a handle to this same registration.
    pub fn is_same(&self, other: &Registration<'_>) -> bool {
        Arc::ptr_eq(&self.seg, &other.seg)
    }

    /// Whether `registry` made this registration (its keys are that
    /// registry's device's or transport's).
    pub fn belongs_to(&self, registry: &crate::MrRegistry) -> bool {
        Arc::ptr_eq(&self.registry, &registry.inner)
    }

    /// Registration id (unique within its registry).
    pub fn id(&self) -> usize {
        self.seg.id
    }

    /// Virtual address of the first byte.
    pub fn addr(&self) -> usize {
        self.seg.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.seg.len
    }

    /// Always false: registrations have at least one byte.
    pub fn is_empty(&self) -> bool {
        self.seg.len == 0
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.seg.lkey
    }

    /// The remote key (usable by peers only with remote access granted).
    pub fn rkey(&self) -> u32 {
        self.seg.rkey
    }

    /// The access rights granted.
    pub fn access(&self) -> AccessFlags {
        self.seg.access
    }

    /// RDMA address of the first byte.
    pub fn rdma_base(&self) -> u64 {
        self.seg.rdma_base
    }

    /// The backend's own keys of this registration, if they are a `T`
    /// (see [`RegisteredKeys::as_any`](crate::RegisteredKeys::as_any)):
    /// how a backend's extension reaches its registration object.
    pub fn keys_as<T: 'static>(&self) -> Option<&T> {
        self.seg._keys.as_any()?.downcast_ref()
    }

    /// The view of the whole registration.
    pub fn view(&self) -> MemoryRegionView {
        self.seg.view_unchecked(self.seg.addr, self.seg.len)
    }

    /// The view of `len` bytes at `offset`.
    pub fn view_at(&self, offset: usize, len: usize) -> Result<MemoryRegionView, MrError> {
        self.view().sub_view(offset, len)
    }

    /// Whether it is device memory (a dma-buf,
    /// [`MrRegistry::register_dmabuf`](crate::MrRegistry::register_dmabuf)):
    /// no bytes of it are in this process.
    pub fn is_device_memory(&self) -> bool {
        self.seg.device
    }

    /// The view of `bytes`, which must lie inside this registration (of
    /// memory in this process: device memory has no bytes to borrow).
    pub fn view_of(&self, bytes: &[u8]) -> Result<MemoryRegionView, MrError> {
        if self.seg.device {
            return Err(MrError::DeviceMemory { id: self.seg.id });
        }
        let addr = bytes.as_ptr() as usize;
        let end = checked_end(addr as u64, bytes.len() as u64)? as usize;
        if !self.seg.covers(addr, end) {
            return Err(MrError::OutOfRange {
                id: self.seg.id,
                offset: addr.wrapping_sub(self.seg.addr) as u64,
                len: bytes.len() as u64,
                size: self.seg.len as u64,
            });
        }
        Ok(self.seg.view_unchecked(addr, bytes.len()))
    }

    /// What a peer needs to reach the whole registration, with its remote
    /// rights. Refused unless remote read, write or atomics were granted
    /// (as [`MemoryRegionView::remote`], which this is for the whole view).
    pub fn remote(&self) -> Result<RemoteMemoryRegion, MrError> {
        self.view().remote()
    }
}

impl Clone for Registration<'_> {
    fn clone(&self) -> Self {
        Registration {
            seg: self.seg.clone(),
            registry: self.registry.clone(),
            _memory: PhantomData,
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.registry.release(&self.seg);
    }
}

impl std::fmt::Debug for Registration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("id", &self.seg.id)
            .field("addr", &format_args!("{:#x}", self.seg.addr))
            .field("len", &self.seg.len)
            .field("rdma_base", &format_args!("{:#x}", self.seg.rdma_base))
            .field("access", &self.access())
            .finish()
    }
}
