//! The registry: register once, look views up by virtual address.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use ferrovia_verbs::ProtectionDomain;
use parking_lot::RwLock;

use crate::buffer::{RegisteredBuffer, RegisteredSlice};
use crate::error::{MrError, checked_end};
use crate::options::{Addressing, RegisterOptions};
use crate::registrar::Registrar;
use crate::registration::Registration;
use crate::segment::{OwnedMemory, Segment};
use crate::stats::{Counters, RegistryStats};
use crate::view::MemoryRegionView;

/// A thread-safe registry of memory registrations in one protection
/// domain. Cheap to clone (all clones share one table).
///
/// ```no_run
/// use ferrovia_mr::{MrRegistry, RegisterOptions};
/// use ferrovia_verbs::{Context, ProtectionDomain};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pd = ProtectionDomain::new(&Context::open_default()?)?;
/// let registry = MrRegistry::new(&pd);
/// // One 64 MiB zero-based registration that peers may write...
/// let opts = RegisterOptions::local().allow_remote_write().zero_based();
/// let arena = registry.alloc(64 << 20, opts)?;
/// // ...and a view of 4 KiB at offset 1 MiB, found by virtual address.
/// let addr = arena.as_ptr() as usize + (1 << 20);
/// let view = registry.view(addr, 4096)?;
/// assert_eq!(view.rdma_addr, 1 << 20);
/// let for_peer = view.remote().encode(); // send this to the peer
/// # let _ = for_peer;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MrRegistry {
    pub(crate) inner: Arc<RegistryInner>,
}

pub(crate) struct RegistryInner {
    registrar: Box<dyn Registrar>,
    table: RwLock<Table>,
    next_id: AtomicUsize,
    pub(crate) counters: Counters,
}

/// Registrations sorted by (start address, id), in two parallel vectors:
/// a lookup binary-searches the dense key vector (few cache lines) and
/// touches one or two entries. Inserting and removing shift the vectors,
/// which is cheap next to the registration itself.
#[derive(Default)]
struct Table {
    keys: Vec<(usize, usize)>,
    entries: Vec<Entry>,
    /// Longest live segment: bounds how far back a lookup must scan.
    max_len: usize,
}

/// What a lookup needs, stored in the map itself so a hit touches no
/// segment behind a pointer.
struct Entry {
    end: usize,
    rdma_base: u64,
    lkey: u32,
    rkey: u32,
    seg: Arc<Segment>,
}

impl Entry {
    fn view(&self, start: usize, id: usize, addr: usize, len: usize) -> MemoryRegionView {
        MemoryRegionView {
            id,
            virtual_addr: addr,
            rdma_addr: (self.rdma_base as usize).wrapping_add(addr - start),
            size: len,
            lkey: self.lkey,
            rkey: self.rkey,
        }
    }
}

impl Table {
    /// Entries that could contain `addr`, nearest start first, as
    /// ((start, id), entry).
    fn candidates(&self, addr: usize) -> impl Iterator<Item = (&(usize, usize), &Entry)> {
        let floor = addr.saturating_sub(self.max_len);
        let upto = self.keys.partition_point(|&(start, _)| start <= addr);
        self.keys[..upto]
            .iter()
            .zip(&self.entries[..upto])
            .rev()
            .take_while(move |((start, _), _)| *start >= floor)
    }

    fn insert(&mut self, key: (usize, usize), entry: Entry) {
        let at = self.keys.partition_point(|k| *k < key);
        self.keys.insert(at, key);
        self.entries.insert(at, entry);
    }

    /// The tightest registration covering `[addr, end)`.
    fn covering(&self, addr: usize, end: usize) -> Option<MemoryRegionView> {
        let mut best: Option<(usize, usize, &Entry)> = None;
        for (&(start, id), e) in self.candidates(addr) {
            if e.end >= end && best.is_none_or(|(s, i, b)| (e.end - start, id) < (b.end - s, i)) {
                best = Some((start, id, e));
            }
        }
        best.map(|(start, id, e)| e.view(start, id, addr, end - addr))
    }

    fn containing(&self, addr: usize) -> Option<&Arc<Segment>> {
        self.candidates(addr)
            .find(|(_, e)| addr < e.end)
            .map(|(_, e)| &e.seg)
    }

    fn remove(&mut self, seg: &Segment) {
        if let Ok(at) = self.keys.binary_search(&(seg.addr, seg.id)) {
            self.keys.remove(at);
            self.entries.remove(at);
        }
        if seg.len == self.max_len {
            self.max_len = self
                .keys
                .iter()
                .zip(&self.entries)
                .map(|(&(s, _), e)| e.end - s)
                .max()
                .unwrap_or(0);
        }
    }
}

impl MrRegistry {
    /// An empty registry for verbs registrations in `pd`.
    pub fn new(pd: &ProtectionDomain) -> MrRegistry {
        Self::with_registrar(pd.clone())
    }

    /// An empty registry whose registrations `registrar` makes (another
    /// transport, or a test double).
    pub fn with_registrar(registrar: impl Registrar + 'static) -> MrRegistry {
        MrRegistry {
            inner: Arc::new(RegistryInner {
                registrar: Box::new(registrar),
                table: RwLock::new(Table::default()),
                next_id: AtomicUsize::new(1),
                counters: Counters::default(),
            }),
        }
    }

    /// Registers memory the registry then owns; the returned buffer derefs
    /// to its bytes and frees them after deregistration.
    pub fn register_buffer(
        &self,
        buf: impl Into<Box<[u8]>>,
        opts: RegisterOptions,
    ) -> Result<RegisteredBuffer, MrError> {
        let buf: Box<[u8]> = buf.into();
        let len = buf.len();
        let owned = OwnedMemory::from_box(buf);
        let ptr = owned.ptr();
        // SAFETY: the segment owns the memory and frees it only after the
        // MR is deregistered (Segment's field order).
        let reg = unsafe { self.insert(ptr, len, opts, Some(owned)) }?;
        // SAFETY: `ptr..ptr+len` is owned by the segment that `reg` keeps
        // alive, and this buffer is its only accessor.
        Ok(unsafe { RegisteredBuffer::new(reg, ptr, len) })
    }

    /// Allocates `len` zeroed, page-aligned bytes and registers them (the
    /// form zero-based registrations want: byte `i` at RDMA address `i`).
    /// A registrar with memory of its own (UCX: shared memory) provides it.
    pub fn alloc(&self, len: usize, opts: RegisterOptions) -> Result<RegisteredBuffer, MrError> {
        if len == 0 {
            return Err(MrError::ZeroLength { addr: 0 });
        }
        let owned = match self.inner.registrar.allocate(len) {
            Some(a) => {
                let a = a?;
                if a.len < len
                    || !(a.ptr.as_ptr() as usize).is_multiple_of(ferrovia_verbs::page_size())
                {
                    return Err(MrError::Registrar(
                        format!(
                            "the registrar allocated {} bytes at {:p} for {len}",
                            a.len, a.ptr
                        )
                        .into(),
                    ));
                }
                OwnedMemory::from_allocation(a)
            }
            None => OwnedMemory::zeroed_page_aligned(len)?,
        };
        let ptr = owned.ptr();
        // SAFETY: as in register_buffer.
        let reg = unsafe { self.insert(ptr, len, opts, Some(owned)) }?;
        // SAFETY: as in register_buffer.
        Ok(unsafe { RegisteredBuffer::new(reg, ptr, len) })
    }

    /// Registers borrowed memory for `'a`; the returned slice gives the
    /// bytes back and deregisters when its last registration handle drops.
    pub fn register_slice<'a>(
        &self,
        buf: &'a mut [u8],
        opts: RegisterOptions,
    ) -> Result<RegisteredSlice<'a>, MrError> {
        let (ptr, len) = (buf.as_mut_ptr(), buf.len());
        // SAFETY: the memory is exclusively borrowed for 'a, and the
        // Registration<'a> handles (the only things keeping the MR alive)
        // cannot outlive 'a.
        let reg = unsafe { self.insert(ptr, len, opts, None) }?;
        // SAFETY: exclusive borrow for 'a, handed to the slice wrapper.
        Ok(unsafe { RegisteredSlice::new(reg, ptr, len) })
    }

    /// Registers `len` bytes at `addr`, or returns the existing
    /// registration that already covers them with at least the asked-for
    /// access and the same RDMA addressing (a hit: the segment is
    /// registered once, however many callers ask).
    ///
    /// # Safety
    /// The memory must stay allocated, and must only be accessed in ways
    /// that do not race with DMA the program or its peers start, for as
    /// long as any handle to the registration exists.
    pub unsafe fn register_raw(
        &self,
        addr: *mut u8,
        len: usize,
        opts: RegisterOptions,
    ) -> Result<Registration<'static>, MrError> {
        let start = addr as usize;
        let end = checked_end(start as u64, len as u64)? as usize;
        {
            let table = self.inner.table.read();
            let found = table.candidates(start).map(|(_, e)| &e.seg).find(|s| {
                s.covers(start, end)
                    && s.owned.is_none()
                    && s.access.contains(opts.access)
                    && opts.addressing == Addressing::Virtual
                    && s.rdma_base == s.addr as u64
            });
            if let Some(seg) = found {
                self.inner.counters.hit();
                return Ok(Registration::new(seg.clone(), self.inner.clone()));
            }
        }
        // SAFETY: forwarded to the caller's contract.
        unsafe { self.insert(addr, len, opts, None) }
    }

    /// Registers and inserts a new segment.
    ///
    /// # Safety
    /// `addr..addr+len` must stay valid for as long as the returned handle
    /// (and its clones) exist.
    unsafe fn insert(
        &self,
        addr: *mut u8,
        len: usize,
        opts: RegisterOptions,
        owned: Option<OwnedMemory>,
    ) -> Result<Registration<'static>, MrError> {
        checked_end(addr as u64, len as u64)?;
        let iova = opts.resolve_iova(addr as usize)?;
        // SAFETY: forwarded to the caller's contract.
        let keys = unsafe { self.inner.registrar.register(addr, len, iova, &opts)? };
        let seg = Arc::new(Segment {
            rdma_base: iova.unwrap_or(addr as u64),
            lkey: keys.lkey(),
            rkey: keys.rkey(),
            access: keys.access(),
            _keys: keys,
            owned,
            id: self.inner.next_id.fetch_add(1, Relaxed),
            addr: addr as usize,
            len,
        });
        let mut table = self.inner.table.write();
        let entry = Entry {
            end: seg.end(),
            rdma_base: seg.rdma_base,
            lkey: seg.lkey,
            rkey: seg.rkey,
            seg: seg.clone(),
        };
        table.insert((seg.addr, seg.id), entry);
        table.max_len = table.max_len.max(len);
        let c = &self.inner.counters;
        c.made.fetch_add(1, Relaxed);
        c.live.fetch_add(1, Relaxed);
        c.bytes.fetch_add(len as u64, Relaxed);
        Ok(Registration::new(seg, self.inner.clone()))
    }

    /// The view of `len` bytes at virtual address `addr`, from the
    /// tightest registration covering all of them.
    pub fn view(&self, addr: usize, len: usize) -> Result<MemoryRegionView, MrError> {
        let end = checked_end(addr as u64, len as u64)? as usize;
        let table = self.inner.table.read();
        if let Some(view) = table.covering(addr, end) {
            self.inner.counters.hit();
            return Ok(view);
        }
        self.inner.counters.miss();
        let first = table.containing(addr);
        let last = table.containing(end - 1);
        Err(match (first, last) {
            (Some(a), Some(b)) if a.id != b.id => MrError::Straddles {
                addr,
                len,
                first: a.id,
                second: b.id,
            },
            (Some(a), _) => MrError::OutOfRange {
                id: a.id,
                offset: (addr - a.addr) as u64,
                len: len as u64,
                size: a.len as u64,
            },
            _ => MrError::NotRegistered { addr, len },
        })
    }

    /// The view covering `bytes`.
    pub fn view_of(&self, bytes: &[u8]) -> Result<MemoryRegionView, MrError> {
        self.view(bytes.as_ptr() as usize, bytes.len())
    }

    /// The counters.
    pub fn stats(&self) -> RegistryStats {
        self.inner.counters.snapshot()
    }
}

impl RegistryInner {
    /// Called when a handle drops: deregisters if it was the last one.
    pub(crate) fn release(&self, seg: &Arc<Segment>) {
        let mut table = self.table.write();
        // Handles and the table hold the only Arcs; clones are made from a
        // live handle or under this lock, so 2 means "the table and me".
        if Arc::strong_count(seg) == 2 {
            table.remove(seg);
            self.counters.live.fetch_sub(1, Relaxed);
            self.counters.bytes.fetch_sub(seg.len as u64, Relaxed);
        }
    }
}

impl std::fmt::Debug for MrRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MrRegistry")
            .field("stats", &self.stats())
            .finish()
    }
}
