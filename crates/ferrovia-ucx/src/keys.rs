//! Memory registration over `ucp_mem_map` and the local key directory.
//!
//! A registration gets a small numeric key (the `rkey` of its
//! `RemoteMemoryRegion`, so descriptors stay the same `Copy` value as on
//! verbs); the packed UCX rkey, the address range and the access rights
//! stay here, and the progress thread hands them to a peer that asks for
//! that key the first time it accesses it. Dropping a registration revokes
//! its key at every peer that fetched it before the memory is unmapped
//! (`revoke`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use ferrovia_mr::{MrError, RegisteredKeys, Registrar};
use ferrovia_types::AccessFlags;
use parking_lot::Mutex;

use crate::context::UcxContext;
use crate::error::UcxError;
use crate::revoke::{self, Driver};
use crate::ucp::{self, MemMap};

/// Set in the keys of registrations whose RDMA addresses are not their
/// pointers (`crate::local_addr` translates their local buffers).
pub(crate) const REBASED: u32 = 1 << 31;

/// What a peer needs to access one registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyInfo {
    /// Where the registration starts in the owner's address space.
    pub(crate) addr: u64,
    /// Its length.
    pub(crate) len: u64,
    /// The RDMA address of its first byte (what descriptors carry).
    pub(crate) iova: u64,
    /// Remote access granted.
    pub(crate) access: AccessFlags,
    /// `ucp_rkey_pack` output.
    pub(crate) packed: Vec<u8>,
}

impl KeyInfo {
    /// The owner's address for `len` bytes at RDMA address `raddr`, if the
    /// range lies inside and `need` is granted.
    pub(crate) fn translate(&self, raddr: u64, len: u64, need: AccessFlags) -> Option<u64> {
        let off = raddr.checked_sub(self.iova)?;
        let end = off.checked_add(len)?;
        (end <= self.len && self.access.contains(need)).then(|| self.addr + off)
    }
}

/// This process's registrations by key, and the memory UCX allocated.
pub(crate) struct KeyDirectory {
    next: AtomicU32,
    /// Live keys and the peers that fetched each: one lock, so a fetch and
    /// a deregistration never interleave (a peer that got a key is always
    /// among those its revocation goes to).
    keys: Mutex<HashMap<u32, Entry>>,
    /// Live `ucp_mem_map(ALLOCATE)` memory, by start address (they do not
    /// overlap). An allocation removes itself as it is unmapped.
    allocations: Mutex<BTreeMap<usize, Weak<Mapped>>>,
    /// How long a deregistration waits for acknowledgements.
    pub(crate) revocation_timeout: Duration,
    /// Per peer: revocations sent to it (keys it had fetched, removed),
    /// for the channel's statistics (`Transport::revocations`).
    revoked: Mutex<Vec<u64>>,
    /// The transport's engine, once started: what a deregistration hands
    /// its revocation to.
    driver: OnceLock<Box<dyn Driver>>,
}

struct Entry {
    info: KeyInfo,
    /// Peers that fetched the key, each once.
    fetched: Vec<usize>,
}

/// Memory UCX allocated (shared memory a peer on this host maps directly,
/// so puts and gets to it are plain copies); unmapped when the last
/// registration and owner drop.
pub(crate) struct Mapped {
    /// Unmapped as this drops, after the last registration and the owner
    /// dropped their `Arc`s.
    memh: MemMap,
    addr: usize,
    len: usize,
    /// Where it is listed once usable (its entry goes when it drops).
    dir: Weak<KeyDirectory>,
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.upgrade() {
            dir.forget_allocation(self);
        }
        // `memh` unmaps now, as the fields drop.
    }
}

impl KeyDirectory {
    pub(crate) fn new(revocation_timeout: Duration) -> KeyDirectory {
        KeyDirectory {
            next: AtomicU32::new(0),
            keys: Mutex::default(),
            allocations: Mutex::default(),
            revoked: Mutex::default(),
            revocation_timeout,
            driver: OnceLock::new(),
        }
    }

    /// Connects deregistration to the transport's engine (once).
    pub(crate) fn set_driver(&self, driver: Box<dyn Driver>) {
        let _ = self.driver.set(driver);
    }

    /// `key`'s registration, noting that `peer` fetched it; `None` once
    /// it is deregistered (or was never issued).
    pub(crate) fn fetch(&self, key: u32, peer: usize) -> Option<KeyInfo> {
        let mut keys = self.keys.lock();
        let e = keys.get_mut(&key)?;
        if !e.fetched.contains(&peer) {
            e.fetched.push(peer);
        }
        Some(e.info.clone())
    }

    fn insert(&self, info: KeyInfo) -> u32 {
        // Keys are not reused (for 2^31 registrations), so a stale
        // descriptor names no live registration; a rebased one's key says
        // so, for its local buffers (`crate::local_addr`).
        let n = (self.next.fetch_add(1, Ordering::Relaxed) + 1) & !REBASED;
        let key = if info.iova == info.addr {
            n
        } else {
            n | REBASED
        };
        self.keys.lock().insert(
            key,
            Entry {
                info,
                fetched: Vec::new(),
            },
        );
        key
    }

    /// This process's address of `len` bytes at RDMA address `addr` of
    /// the live registration `key`, if they lie inside it.
    pub(crate) fn local_addr(&self, key: u32, addr: u64, len: u64) -> Option<u64> {
        let keys = self.keys.lock();
        let info = &keys.get(&key)?.info;
        let off = addr.checked_sub(info.iova)?;
        (off.checked_add(len)? <= info.len).then(|| info.addr + off)
    }

    /// Removes `key` (a fetch from now on answers "not found"); the peers
    /// that fetched it.
    fn remove(&self, key: u32) -> Vec<usize> {
        let fetched = self
            .keys
            .lock()
            .remove(&key)
            .map(|e| e.fetched)
            .unwrap_or_default();
        if !fetched.is_empty() {
            let mut revoked = self.revoked.lock();
            for &p in &fetched {
                if revoked.len() <= p {
                    revoked.resize(p + 1, 0);
                }
                revoked[p] += 1;
            }
        }
        fetched
    }

    /// Revocations sent to `peer` so far.
    pub(crate) fn revocations(&self, peer: usize) -> u64 {
        self.revoked.lock().get(peer).copied().unwrap_or(0)
    }

    /// Every live key some peer fetched, with those peers, who are
    /// forgotten (the transport revokes them as it shuts down).
    pub(crate) fn take_fetched(&self) -> Vec<(u32, Vec<usize>)> {
        let mut keys = self.keys.lock();
        keys.iter_mut()
            .filter(|(_, e)| !e.fetched.is_empty())
            .map(|(&k, e)| (k, std::mem::take(&mut e.fetched)))
            .collect()
    }

    /// The UCX allocation holding `[addr, addr + len)`, if any: the one
    /// starting nearest at or before `addr` (allocations do not overlap).
    fn allocation_of(&self, addr: usize, len: usize) -> Option<Arc<Mapped>> {
        let end = addr.checked_add(len)?;
        // Upgraded outside the lock: if this turns out to be the last
        // `Arc`, the allocation unlists itself as it drops.
        let nearest = {
            let all = self.allocations.lock();
            all.range(..=addr).next_back()?.1.clone()
        };
        // An allocation being unmapped no longer upgrades (and no one can
        // be registering its memory).
        let m = nearest.upgrade()?;
        (end <= m.addr + m.len).then_some(m)
    }

    /// Lists `mapped`, which is usable from now on.
    fn remember_allocation(&self, mapped: &Arc<Mapped>) {
        self.allocations
            .lock()
            .insert(mapped.addr, Arc::downgrade(mapped));
    }

    /// Unlists `mapped` as it is unmapped, unless another allocation has
    /// its start already (never while it is mapped; checked all the same).
    fn forget_allocation(&self, mapped: &Mapped) {
        let mut all = self.allocations.lock();
        if all
            .get(&mapped.addr)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), mapped))
        {
            all.remove(&mapped.addr);
        }
    }

    /// How many UCX allocations are listed.
    #[cfg(test)]
    fn allocations_listed(&self) -> usize {
        self.allocations.lock().len()
    }
}

/// Registers memory for a UCX transport; hand it to
/// `MrRegistry::with_registrar`.
#[derive(Clone)]
pub struct UcxRegistrar {
    pub(crate) ctx: Arc<ucp::Context>,
    pub(crate) dir: Arc<KeyDirectory>,
}

impl UcxRegistrar {
    pub(crate) fn new(ctx: &UcxContext, dir: Arc<KeyDirectory>) -> UcxRegistrar {
        UcxRegistrar {
            ctx: ctx.handle.clone(),
            dir,
        }
    }
}

/// One registration's memory handle and directory entry; dropping it
/// unmaps (or releases its share of a UCX allocation).
struct UcxKeys {
    key: u32,
    /// Unmapped (or its share of a UCX allocation released) as the fields
    /// drop, after `Drop::drop`'s revocation: held, never read.
    #[allow(dead_code)]
    memh: Memh,
    access: AccessFlags,
    dir: Arc<KeyDirectory>,
}

enum Memh {
    /// `ucp_mem_map` of the caller's memory, owned by this registration.
    Own(#[allow(dead_code)] MemMap),
    /// Part of a UCX allocation, kept mapped while this registration lives.
    Shared(#[allow(dead_code)] Arc<Mapped>),
}

// SAFETY: `access` is what the registration was asked for (set once in
// `register`), and the keys (`key`) never change. Rights: ferrovia peers
// check range and rights against the directory's answer before every put
// or get (`KeyInfo::translate`); UCX itself does not enforce rights on tcp
// or shared memory, so peers are trusted to run ferrovia (the job token
// admits them; docs/ARCHITECTURE.md states this boundary). Drop: the key
// leaves the directory first (no new fetch succeeds), then every peer that
// fetched it has acknowledged its revocation, after flushing its own
// accesses, or has had its endpoint closed, before the memory is unmapped
// (the revocation protocol), so no access through the key lands afterwards.
unsafe impl RegisteredKeys for UcxKeys {
    fn lkey(&self) -> u32 {
        self.key
    }
    fn rkey(&self) -> u32 {
        self.key
    }
    fn access(&self) -> AccessFlags {
        self.access
    }
}

impl Drop for UcxKeys {
    fn drop(&mut self) {
        // Nothing is unmapped (and the registry frees nothing) before
        // every peer that fetched the key acknowledged its revocation or
        // has its endpoint closed.
        let fetched = self.dir.remove(self.key);
        if !fetched.is_empty() {
            let timeout = self.dir.revocation_timeout;
            revoke::revoke(
                self.dir.driver.get().map(|d| &**d),
                self.key,
                fetched,
                timeout,
            );
        }
        // `memh` unmaps (an own mapping) now, as the fields drop: after the
        // revocation above.
    }
}

fn to_mr(e: UcxError) -> MrError {
    MrError::Registrar(Box::new(e))
}

// SAFETY: `allocate` returns memory from `ucp_mem_map(ALLOCATE)` checked to
// be page-aligned and at least `len` long, zeroed here, used by nothing
// else, and freed only when the returned owner (the last `Arc<Mapped>`)
// drops; `register` records exactly the asked-for access (see
// `UcxKeys`).
unsafe impl Registrar for UcxRegistrar {
    fn allocate(&self, len: usize) -> Option<Result<ferrovia_mr::Allocation, MrError>> {
        Some(self.allocate_mapped(len).map_err(to_mr))
    }

    unsafe fn register(
        &self,
        addr: *mut u8,
        len: usize,
        iova: Option<u64>,
        access: AccessFlags,
    ) -> Result<Box<dyn RegisteredKeys>, MrError> {
        let (memh, packed) = match self.dir.allocation_of(addr as usize, len) {
            Some(m) => {
                let packed = m.memh.pack().map_err(to_mr)?;
                (Memh::Shared(m), packed)
            }
            None => {
                // SAFETY: the caller keeps `len` bytes at `addr` allocated
                // while the keys exist, and the keys own the map.
                let memh = unsafe { MemMap::map(&self.ctx, addr, len) }.map_err(to_mr)?;
                // A failed pack unmaps it again (it drops).
                let packed = memh.pack().map_err(to_mr)?;
                (Memh::Own(memh), packed)
            }
        };
        let key = self.dir.insert(KeyInfo {
            addr: addr as u64,
            len: len as u64,
            iova: iova.unwrap_or(addr as u64),
            access,
            packed,
        });
        Ok(Box::new(UcxKeys {
            key,
            memh,
            access,
            dir: self.dir.clone(),
        }))
    }

    /// Maps the dma-buf and registers the mapping (`crate::dmabuf`):
    /// host-memory dma-bufs only.
    fn register_dmabuf(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Box<dyn RegisteredKeys>, MrError> {
        crate::dmabuf::register(self, fd, offset, len, iova, access)
    }
}

impl UcxRegistrar {
    /// `ucp_mem_map(ALLOCATE)`: memory UCX places where its transports reach
    /// it fastest (shared memory on this host).
    fn allocate_mapped(&self, len: usize) -> Result<ferrovia_mr::Allocation, UcxError> {
        // Unmapped on every path from here (it drops).
        let memh = MemMap::allocate(&self.ctx, len)?;
        let (ptr, got) = memh.query()?;
        let mut mapped = Mapped {
            memh,
            addr: 0,
            len: 0,
            dir: Arc::downgrade(&self.dir),
        };
        let page = ferrovia_types::page_size();
        let unusable = || UcxError::UnusableAllocation {
            asked: len,
            got,
            addr: ptr as usize,
        };
        let Some(nn) = std::ptr::NonNull::new(ptr) else {
            return Err(unusable());
        };
        if got < len || !(ptr as usize).is_multiple_of(page) {
            return Err(unusable());
        }
        // SAFETY: UCX allocated `got` writable bytes at `ptr`, used
        // by nothing else yet; MrRegistry::alloc promises zeroes.
        unsafe { std::ptr::write_bytes(ptr, 0, got) };
        mapped.addr = ptr as usize;
        mapped.len = got;
        let mapped = Arc::new(mapped);
        self.dir.remember_allocation(&mapped);
        // SAFETY: `got` bytes at `nn`, page-aligned (checked above),
        // zeroed above and used by nothing else; the memory stays mapped
        // until the last `Arc<Mapped>` drops: the owner, or a registration
        // of it that outlives the owner (the registry drops the owner last).
        Ok(unsafe { ferrovia_mr::Allocation::new(nn, got, Box::new(mapped)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_found_by_address_and_unlisted_when_unmapped() {
        let ctx = UcxContext::with_options(&[("TLS", "tcp")]).expect("ucp_init over tcp");
        let dir = Arc::new(KeyDirectory::new(Duration::from_secs(1)));
        let registrar = UcxRegistrar::new(&ctx, dir.clone());
        let page = ferrovia_types::page_size();
        let mut live: Vec<_> = (0..200)
            .map(|i| {
                let len = [64, 5000, 3 * page][i % 3];
                registrar.allocate_mapped(len).expect("ucp_mem_map")
            })
            .collect();
        assert_eq!(dir.allocations_listed(), 200);
        let at = |addr: usize, len: usize| dir.allocation_of(addr, len).map(|m| m.addr);
        for a in &live {
            let (p, len) = (a.ptr().as_ptr() as usize, a.len());
            assert_eq!(at(p, len), Some(p), "all of it");
            assert_eq!(at(p, 1), Some(p), "its first byte");
            assert_eq!(at(p + len - 1, 1), Some(p), "its last byte");
            assert_ne!(at(p + len, 1), Some(p), "past its end");
            assert_ne!(at(p - 1, 1), Some(p), "before its start");
            assert_eq!(at(p + len - 1, 2), None, "across its end");
            assert_eq!(at(p - 1, 2), None, "across its start");
        }
        assert_eq!(at(usize::MAX - 1, 2), None);
        assert_eq!(at(8, 8), None);
        // Unmapped allocations leave the directory.
        let gone: Vec<usize> = live
            .drain(..100)
            .map(|a| a.ptr().as_ptr() as usize)
            .collect();
        assert_eq!(dir.allocations_listed(), 100);
        for p in gone {
            assert_ne!(at(p, 1), Some(p));
        }
        // Through the registry: listed while a handle of its registration
        // lives, unlisted once the last one drops.
        let registry = ferrovia_mr::MrRegistry::with_registrar(registrar.clone());
        let buf = registry
            .alloc(100, ferrovia_mr::RegisterOptions::local())
            .expect("alloc");
        let p = buf.addr();
        assert_eq!(at(p, 100), Some(p));
        let extra = buf.registration().clone();
        drop(buf);
        assert_eq!(at(p, 100), Some(p), "a handle is still alive");
        drop(extra);
        assert_ne!(at(p, 100), Some(p));
        drop(live);
        assert_eq!(dir.allocations_listed(), 0);
    }

    #[test]
    fn translation_checks_range_and_rights() {
        let k = KeyInfo {
            addr: 0x7000_0000,
            len: 4096,
            iova: 16,
            access: AccessFlags::REMOTE_WRITE,
            packed: vec![],
        };
        assert_eq!(
            k.translate(16, 4096, AccessFlags::REMOTE_WRITE),
            Some(0x7000_0000)
        );
        assert_eq!(
            k.translate(20, 8, AccessFlags::REMOTE_WRITE),
            Some(0x7000_0004)
        );
        assert_eq!(k.translate(15, 1, AccessFlags::REMOTE_WRITE), None);
        assert_eq!(k.translate(16, 4097, AccessFlags::REMOTE_WRITE), None);
        assert_eq!(k.translate(u64::MAX, 2, AccessFlags::REMOTE_WRITE), None);
        assert_eq!(k.translate(16, 8, AccessFlags::REMOTE_READ), None);
    }
}
