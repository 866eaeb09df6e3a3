//! Memory registration over `ucp_mem_map` and the local key directory.
//!
//! A registration gets a small numeric key (the `rkey` of its
//! `RemoteMemoryRegion`, so descriptors stay the same `Copy` value as on
//! verbs); the packed UCX rkey, the address range and the access rights
//! stay here, and the progress thread hands them to a peer that asks for
//! that key the first time it accesses it.

use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use ferrovia_mr::{MrError, RegisterOptions, RegisteredKeys, Registrar};
use ferrovia_verbs::AccessFlags;
use parking_lot::RwLock;

use crate::context::{ContextHandle, UcxContext};
use crate::error::{UcxError, check};
use crate::ffi;

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

/// This process's registrations by key.
#[derive(Default)]
pub(crate) struct KeyDirectory {
    next: AtomicU32,
    keys: RwLock<HashMap<u32, KeyInfo>>,
}

impl KeyDirectory {
    pub(crate) fn get(&self, key: u32) -> Option<KeyInfo> {
        self.keys.read().get(&key).cloned()
    }

    fn insert(&self, info: KeyInfo) -> u32 {
        // Keys are never reused, so a stale descriptor names no live
        // registration.
        let key = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.keys.write().insert(key, info);
        key
    }

    fn remove(&self, key: u32) {
        self.keys.write().remove(&key);
    }
}

/// Registers memory for a UCX transport; hand it to
/// `MrRegistry::with_registrar`.
#[derive(Clone)]
pub struct UcxRegistrar {
    pub(crate) ctx: Arc<ContextHandle>,
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

/// One `ucp_mem_map` and its directory entry; dropping it unmaps.
struct UcxKeys {
    key: u32,
    memh: ffi::ucp_mem_h,
    access: AccessFlags,
    ctx: Arc<ContextHandle>,
    dir: Arc<KeyDirectory>,
}

// SAFETY: the memory handle is only passed back to `ucp_mem_unmap` on a
// context created with `mt_workers_shared` (UCX locks it).
unsafe impl Send for UcxKeys {}
// SAFETY: as above; `&UcxKeys` exposes only plain fields.
unsafe impl Sync for UcxKeys {}

impl RegisteredKeys for UcxKeys {
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
        self.dir.remove(self.key);
        // SAFETY: mapped once by `register`, unmapped once here.
        let status = unsafe { ffi::ucp_mem_unmap(self.ctx.raw, self.memh) };
        if let Err(e) = check("ucp_mem_unmap", status) {
            log::warn!("{e}");
        }
    }
}

fn to_mr(e: UcxError) -> MrError {
    MrError::Registrar(Box::new(e))
}

impl Registrar for UcxRegistrar {
    unsafe fn register(
        &self,
        addr: *mut u8,
        len: usize,
        iova: Option<u64>,
        opts: &RegisterOptions,
    ) -> Result<Box<dyn RegisteredKeys>, MrError> {
        let params = ffi::ucp_mem_map_params_t {
            field_mask: u64::from(
                ffi::UCP_MEM_MAP_PARAM_FIELD_ADDRESS | ffi::UCP_MEM_MAP_PARAM_FIELD_LENGTH,
            ),
            address: addr.cast::<c_void>(),
            length: len,
            ..Default::default()
        };
        let mut memh = null_mut();
        // SAFETY: the caller keeps `len` bytes at `addr` allocated while the
        // keys exist; the context outlives them through the `Arc`.
        check("ucp_mem_map", unsafe {
            ffi::ucp_mem_map(self.ctx.raw, &params, &mut memh)
        })
        .map_err(to_mr)?;
        let mut buf = null_mut();
        let mut size = 0usize;
        // SAFETY: `memh` was just mapped on this context.
        let packed = check("ucp_rkey_pack", unsafe {
            ffi::ucp_rkey_pack(self.ctx.raw, memh, &mut buf, &mut size)
        })
        .map(|()| {
            // SAFETY: UCX returned `size` readable bytes at `buf`; released
            // once after copying.
            let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), size) }.to_vec();
            // SAFETY: as above.
            unsafe { ffi::ucp_rkey_buffer_release(buf) };
            bytes
        });
        let packed = match packed {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: mapped above, unmapped once.
                unsafe { ffi::ucp_mem_unmap(self.ctx.raw, memh) };
                return Err(to_mr(e));
            }
        };
        let access = opts.access();
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
            ctx: self.ctx.clone(),
            dir: self.dir.clone(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
