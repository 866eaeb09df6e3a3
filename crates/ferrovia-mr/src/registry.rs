//! The registry: register once, look views up by virtual address.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use parking_lot::RwLock;

use ferrovia_types::AccessFlags;

use crate::access::{Access, Local, Shared};
use crate::buffer::{RegisteredBuffer, RegisteredMemory, RegisteredSlice, SharedSlice};
use crate::error::{IntoLocalError, MrError, checked_end};
use crate::options::{Addressing, RegisterOptions};
use crate::registrar::Registrar;
use crate::registration::Registration;
use crate::registry_state::{Entry, RegistryInner};
use crate::segment::{OwnedMemory, Segment};
use crate::stats::{Counters, RegistryStats};
use crate::table::Table;
use crate::view::MemoryRegionView;

/// A thread-safe registry of memory registrations in one protection
/// domain. Cheap to clone (all clones share one table).
///
/// ```no_run
/// use ferrovia_mr::{MrRegistry, RegisterOptions};
///
/// # fn example(registry: MrRegistry) -> Result<(), Box<dyn std::error::Error>> {
/// // `registry` from a backend: `ferrovia_verbs_transport::registry(&pd)`
/// // One 64 MiB zero-based registration that peers may write...
/// let opts = RegisterOptions::local().allow_remote_write().zero_based();
/// let arena = registry.alloc(64 << 20, opts)?;
/// // ...and a view of 4 KiB at offset 1 MiB, found by virtual address.
/// let addr = arena.addr() + (1 << 20);
/// let view = registry.view(addr, 4096)?;
/// assert_eq!(view.rdma_addr, 1 << 20);
/// let for_peer = view.remote()?.encode(); // send this to the peer
/// # let _ = for_peer;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct MrRegistry {
    pub(crate) inner: Arc<RegistryInner>,
}

impl MrRegistry {
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

    /// Registers memory the registry then owns; the returned buffer frees
    /// it after deregistration. [`Local`] memory derefs to its bytes;
    /// [`Shared`] memory may start anywhere (a `Vec<u8>` need not be
    /// 8-byte aligned) and have any length: its copies work at any
    /// alignment, its word accessors need aligned words (memory from
    /// [`MrRegistry::alloc`] starts page-aligned).
    pub fn register_buffer<A: Access>(
        &self,
        buf: impl Into<Box<[u8]>>,
        opts: RegisterOptions<A>,
    ) -> Result<RegisteredBuffer<A>, MrError> {
        let buf: Box<[u8]> = buf.into();
        let len = buf.len();
        let owned = OwnedMemory::from_box(buf);
        let ptr = owned.ptr();
        // SAFETY: the segment owns the memory and frees it only after the
        // MR is deregistered (Segment's field order).
        let reg = unsafe { self.insert(ptr, len, &opts, Some(owned)) }?;
        // SAFETY: `ptr..ptr+len` is owned by the segment that `reg` keeps
        // alive and this buffer is its only accessor; the registration
        // grants what `A` says (RegisterOptions<Local> cannot ask for
        // remote write or atomics); atomics reach exactly the buffer.
        Ok(unsafe { RegisteredMemory::new(reg, ptr, len) })
    }

    /// Allocates `len` zeroed, page-aligned bytes and registers them (the
    /// form zero-based registrations want: byte `i` at RDMA address `i`).
    /// A registrar with memory of its own (UCX: shared memory) provides it.
    pub fn alloc<A: Access>(
        &self,
        len: usize,
        opts: RegisterOptions<A>,
    ) -> Result<RegisteredBuffer<A>, MrError> {
        if len == 0 {
            return Err(MrError::ZeroLength { addr: 0 });
        }
        // Whole words, so `Shared` memory's last word is ours to load.
        let words = len.checked_next_multiple_of(8).ok_or(MrError::Overflow {
            addr: 0,
            len: len as u64,
        })?;
        let owned = match self.inner.registrar.allocate(words) {
            Some(a) => {
                let a = a?;
                if a.len() < words
                    || !(a.ptr().as_ptr() as usize).is_multiple_of(ferrovia_types::page_size())
                {
                    return Err(MrError::Registrar(
                        format!(
                            "the registrar allocated {} bytes at {:p} for {words}",
                            a.len(),
                            a.ptr()
                        )
                        .into(),
                    ));
                }
                OwnedMemory::from_allocation(a)
            }
            None => OwnedMemory::zeroed_page_aligned(words)?,
        };
        let ptr = owned.ptr();
        // SAFETY: as in register_buffer.
        let reg = unsafe { self.insert(ptr, len, &opts, Some(owned)) }?;
        // SAFETY: as in register_buffer; the allocation holds whole words,
        // so `Shared` memory's atomics may reach its padding (the span).
        Ok(unsafe { RegisteredMemory::new(reg, ptr, len) })
    }

    /// Registers borrowed memory for `'a`, [`Local`]: the returned slice
    /// gives the bytes back and deregisters when its last registration
    /// handle drops.
    ///
    /// Borrowed memory peers may write or run atomics on is
    /// [`MrRegistry::register_shared_slice`], which is `unsafe`: a leaked
    /// handle (`mem::forget`) ends the borrow without deregistering, and a
    /// peer could then write freed memory. Local memory is written only by
    /// this process's own requests, which a scope waits for. (A leaked
    /// handle of memory registered with [`RegisterOptions::allow_remote_read`]
    /// still lets peers read what later lives there: leak none.)
    pub fn register_slice<'a>(
        &self,
        buf: &'a mut [u8],
        opts: RegisterOptions<Local>,
    ) -> Result<RegisteredSlice<'a, Local>, MrError> {
        // SAFETY: Local memory grants peers no write or atomics, so a
        // handle that outlives the borrow (leaked) lets no peer write it.
        unsafe { self.register_borrowed(buf, opts) }
    }

    /// Registers borrowed memory for `'a` that peers may write or run
    /// atomics on ([`Shared`]; it may start anywhere and have any length,
    /// see [`MrRegistry::register_buffer`]). Owned memory
    /// ([`MrRegistry::alloc`], [`MrRegistry::register_buffer`]) needs none
    /// of this.
    ///
    /// # Safety
    /// Neither the returned slice nor any clone of its [`Registration`]
    /// may be leaked (`mem::forget`, a reference cycle, a leaked box): the
    /// borrow ends when a handle is forgotten, yet the memory stays
    /// registered, so peers holding its descriptor could write it after
    /// it was freed or reused. Dropping every handle (the normal end of a
    /// scope, or a panic unwinding through it) is what the registry needs.
    pub unsafe fn register_shared_slice<'a>(
        &self,
        buf: &'a mut [u8],
        opts: RegisterOptions<Shared>,
    ) -> Result<SharedSlice<'a>, MrError> {
        // SAFETY: the caller leaks no handle, so every handle drops (and
        // the last deregisters) before the borrow ends.
        unsafe { self.register_borrowed(buf, opts) }
    }

    /// Both kinds of borrowed registration.
    ///
    /// # Safety
    /// For [`Shared`] memory, no handle may be leaked (see
    /// [`MrRegistry::register_shared_slice`]).
    unsafe fn register_borrowed<'a, A: Access>(
        &self,
        buf: &'a mut [u8],
        opts: RegisterOptions<A>,
    ) -> Result<RegisteredSlice<'a, A>, MrError> {
        let (ptr, len) = (buf.as_mut_ptr(), buf.len());
        // SAFETY: the memory is exclusively borrowed for 'a, and the
        // Registration<'a> handles (the only things keeping the MR alive)
        // cannot outlive 'a unless leaked, which the caller rules out
        // where it matters.
        let reg = unsafe { self.insert(ptr, len, &opts, None) }?;
        // SAFETY: exclusive borrow for 'a, handed to the wrapper; access
        // as in register_buffer, atomics reach exactly the borrow.
        Ok(unsafe { RegisteredMemory::new(reg, ptr, len) })
    }

    /// Registers the bytes of `of` (owned memory of another registry:
    /// another device's protection domain, another UCX worker) with this
    /// registry too, with `opts` (the same access kind `A`): what one
    /// buffer needs to be reached over several rails. The handle gives
    /// keys, not bytes, so the bytes keep one accessor, `of`; it keeps
    /// them allocated while it lives (`of`'s registration outlives every
    /// alias), and while an alias lives `of` cannot become plain memory
    /// ([`RegisteredMemory::into_local`] fails with
    /// [`MrError::StillShared`]: peers could still write through the
    /// alias's key).
    pub fn register_alias<A: Access>(
        &self,
        of: &RegisteredBuffer<A>,
        opts: RegisterOptions<A>,
    ) -> Result<Registration<'static>, MrError> {
        let (ptr, len) = (of.ptr, of.len);
        let keep = OwnedMemory::alias(of.reg.clone(), ptr, len);
        // SAFETY: the new segment holds a handle to `of`'s registration,
        // whose segment owns the bytes and frees them only when its last
        // handle drops: after this alias. The bytes are reached only
        // through `of`, whose access kind `A` the alias shares (Local
        // memory stays unwritable by peers), so DMA through the alias's
        // keys races nothing the type system allows.
        let reg = unsafe { self.insert(ptr, len, &opts, Some(keep)) }?;
        Ok(reg)
    }

    /// Registers `len` bytes at `addr`, or returns the existing
    /// registration that already covers them with at least the asked-for
    /// access and the same RDMA addressing (a hit: the segment is
    /// registered once, however many callers ask).
    ///
    /// # Safety
    /// The memory must stay allocated, and must only be accessed in ways
    /// that do not race with DMA the program or its peers start, for as
    /// long as any handle to the registration exists. A hit may return a
    /// registration that grants peers more than asked (one made by another
    /// caller): the memory must then be treated as theirs to write.
    pub unsafe fn register_raw<A: Access>(
        &self,
        addr: *mut u8,
        len: usize,
        opts: RegisterOptions<A>,
    ) -> Result<Registration<'static>, MrError> {
        let start = addr as usize;
        let end = checked_end(start as u64, len as u64)? as usize;
        {
            let table = self.inner.table.read();
            // The nearest-starting registration that covers the range and
            // would have been made the same way.
            let found = table.covering(start, end, |hit| {
                let s = &hit.value.seg;
                if s.owned.is_none()
                    && !s.device
                    && s.access.contains(opts.access)
                    && opts.addressing == Addressing::Virtual
                    && s.rdma_base == s.addr as u64
                {
                    ControlFlow::Break(s)
                } else {
                    ControlFlow::Continue(())
                }
            });
            if let Some(seg) = found {
                self.inner.counters.hit();
                return Ok(Registration::new(seg.clone(), self.inner.clone()));
            }
        }
        // SAFETY: `insert` needs the memory valid while the handle lives,
        // exactly what our caller promises.
        unsafe { self.insert(addr, len, &opts, None) }
    }

    /// Registers and inserts a new segment.
    ///
    /// # Safety
    /// `addr..addr+len` must stay valid for as long as the returned handle
    /// (and its clones) exist.
    unsafe fn insert<A: Access>(
        &self,
        addr: *mut u8,
        len: usize,
        opts: &RegisterOptions<A>,
        owned: Option<OwnedMemory>,
    ) -> Result<Registration<'static>, MrError> {
        checked_end(addr as u64, len as u64)?;
        let iova = opts.resolve_iova(addr as usize)?;
        // SAFETY: the registrar needs the memory allocated while the keys
        // live; the keys live in the segment, which our caller keeps no
        // longer than the memory (its contract).
        let keys = unsafe { self.register_keys(addr, len, iova, opts.access)? };
        Ok(self.insert_keys(addr, len, iova, keys, owned))
    }

    /// Registers `len` bytes at `addr` with the registrar, refusing keys
    /// that grant more than asked.
    ///
    /// # Safety
    /// As for [`Registrar::register`].
    unsafe fn register_keys(
        &self,
        addr: *mut u8,
        len: usize,
        iova: Option<u64>,
        access: AccessFlags,
    ) -> Result<Box<dyn crate::registrar::RegisteredKeys>, MrError> {
        // SAFETY: `Registrar::register` asks for the memory to stay
        // allocated while the keys exist, which is this function's own
        // contract.
        unsafe { self.inner.registrar.register(addr, len, iova, access) }
    }

    /// Registers `len` bytes of the dma-buf `fd` from byte `offset`
    /// (device memory: a GPU's, or host memory exported by `udmabuf`),
    /// as the segment at device address `addr`: the address the program
    /// knows the memory by (a caching allocator's segment base), which
    /// views are looked up by ([`MrRegistry::view`]). Its first byte's
    /// RDMA address is `addr`, or with
    /// [`zero_based`](RegisterOptions::zero_based) `offset`'s offset within
    /// a page (byte `i` of a page-aligned dma-buf range at RDMA address
    /// `i`: a view at `addr + k` has RDMA address `k`), or an explicit
    /// [`rdma_base`](RegisterOptions::rdma_base) sharing that offset.
    ///
    /// No byte of it is in this process: the registration is never a
    /// slice; it is named by range (views, remote descriptors, and
    /// `Gather::device` in the channel). `offset + len` must lie within the
    /// dma-buf. A backend that cannot register dma-bufs, or a device that
    /// refuses them (soft-RoCE), is a typed error, and nothing is
    /// registered.
    pub fn register_dmabuf<A: Access>(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
        addr: u64,
        opts: RegisterOptions<A>,
    ) -> Result<Registration<'static>, MrError> {
        if len == 0 {
            return Err(MrError::ZeroLength { addr });
        }
        let end = checked_end(addr, len as u64)?;
        let _ = usize::try_from(end).map_err(|_| MrError::Overflow {
            addr,
            len: len as u64,
        })?;
        let page = ferrovia_types::page_size() as u64;
        let in_page = offset % page;
        let iova = match opts.addressing {
            Addressing::Virtual => addr,
            Addressing::ZeroBased => in_page,
            Addressing::Base(b) if b % page == in_page => b,
            Addressing::Base(b) => {
                return Err(MrError::MisalignedRdmaBase {
                    addr: offset as usize,
                    iova: b,
                    page,
                });
            }
        };
        let keys = self
            .inner
            .registrar
            .register_dmabuf(fd, offset, len, iova, opts.access)?;
        let seg = Arc::new(Segment {
            span: len,
            rdma_base: iova,
            lkey: keys.lkey(),
            rkey: keys.rkey(),
            access: keys.access(),
            _keys: keys,
            owned: None,
            id: self.inner.next_id.fetch_add(1, Relaxed),
            addr: addr as usize,
            len,
            device: true,
        });
        Ok(self.insert_segment(seg))
    }

    /// Inserts a segment made of `keys` (and the memory it may own).
    fn insert_keys(
        &self,
        addr: *mut u8,
        len: usize,
        iova: Option<u64>,
        keys: Box<dyn crate::registrar::RegisteredKeys>,
        owned: Option<OwnedMemory>,
    ) -> Registration<'static> {
        // Owned memory (at `addr`) may hold whole words past `len`: what
        // `alloc` allocates for `Shared` memory's last word.
        let words = len.checked_next_multiple_of(8).unwrap_or(len);
        let span = owned.as_ref().map_or(len, |o| o.len().clamp(len, words));
        let seg = Arc::new(Segment {
            span,
            rdma_base: iova.unwrap_or(addr as u64),
            lkey: keys.lkey(),
            rkey: keys.rkey(),
            access: keys.access(),
            _keys: keys,
            owned,
            id: self.inner.next_id.fetch_add(1, Relaxed),
            addr: addr as usize,
            len,
            device: false,
        });
        self.insert_segment(seg)
    }

    /// Adds `seg` to the table and the counters.
    fn insert_segment(&self, seg: Arc<Segment>) -> Registration<'static> {
        let len = seg.len;
        let mut table = self.inner.table.write();
        let entry = Entry {
            rdma_base: seg.rdma_base,
            lkey: seg.lkey,
            rkey: seg.rkey,
            access: seg.access,
            seg: seg.clone(),
        };
        table.insert(seg.addr, seg.end(), seg.id, entry);
        let c = &self.inner.counters;
        c.made.fetch_add(1, Relaxed);
        c.live.fetch_add(1, Relaxed);
        c.bytes.fetch_add(len as u64, Relaxed);
        Registration::new(seg, self.inner.clone())
    }

    /// The view of `len` bytes at virtual address `addr`, from the
    /// tightest registration covering all of them.
    pub fn view(&self, addr: usize, len: usize) -> Result<MemoryRegionView, MrError> {
        let end = checked_end(addr as u64, len as u64)? as usize;
        let table = self.inner.table.read();
        if let Some(hit) = table.tightest(addr, end) {
            self.inner.counters.hit();
            return Ok(hit.value.view(hit.start, hit.id, addr, len));
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
                offset: (addr - a.start) as u64,
                len: len as u64,
                size: a.len() as u64,
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

impl std::fmt::Debug for MrRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MrRegistry")
            .field("stats", &self.stats())
            .finish()
    }
}

impl<'a> RegisteredMemory<'a, Shared> {
    /// Ends peers' access and gives the bytes back as [`Local`] memory,
    /// registered anew with `opts`.
    ///
    /// What proves that no peer can write any more: the shared
    /// registration is deregistered before the bytes become a slice.
    /// Deregistration returns only once the device (verbs) no longer
    /// accepts its rkey, or once every peer that fetched the key has
    /// acknowledged its revocation or lost its connection (UCX); a peer's
    /// later access with an old descriptor fails with a remote access
    /// error. So this must be the only handle to the registration: if
    /// clones of its [`Registration`] exist, it fails with
    /// [`MrError::StillShared`] and hands the buffer back unchanged. The
    /// new registration is made first, so a failure to register leaves
    /// the shared one in place too. Costs a registration and a
    /// deregistration (tens of microseconds on verbs).
    pub fn into_local(
        self,
        opts: RegisterOptions<Local>,
    ) -> Result<RegisteredMemory<'a, Local>, IntoLocalError<'a>> {
        let registry = MrRegistry {
            inner: self.reg.registry.clone(),
        };
        let (ptr, len) = (self.ptr, self.len);
        let fail = |buffer, error| Err(IntoLocalError { buffer, error });
        let iova = match opts.resolve_iova(ptr as usize) {
            Ok(iova) => iova,
            Err(e) => return fail(self, e),
        };
        if Arc::strong_count(&self.reg.seg) != 2 {
            let handles = Arc::strong_count(&self.reg.seg) - 1;
            return fail(self, MrError::StillShared { handles });
        }
        // SAFETY: the memory stays allocated while `self` (and then the
        // new segment, which takes over owned memory) lives.
        let keys = match unsafe { registry.register_keys(ptr, len, iova, opts.access) } {
            Ok(k) => k,
            Err(e) => return fail(self, e),
        };
        if let Err(e) = registry.inner.detach_unique(&self.reg.seg) {
            return fail(self, e);
        }
        let RegisteredMemory { mut reg, .. } = self;
        // Detached: this handle holds the only reference.
        let owned = Arc::get_mut(&mut reg.seg).and_then(|seg| seg.owned.take());
        // Deregisters the shared keys: from here no peer can write.
        drop(reg);
        let reg = registry.insert_keys(ptr, len, iova, keys, owned);
        // SAFETY: the memory is valid for 'a (owned by the new segment, or
        // borrowed for 'a as before), this is its only accessor, and the
        // only registration left grants no remote write or atomics.
        Ok(unsafe { RegisteredMemory::new(reg, ptr, len) })
    }
}
