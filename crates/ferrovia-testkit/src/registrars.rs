//! Registrars that need no device: `NoDevice` (fixed keys, for doubles
//! that never touch memory) and `FakeRegistrar` (distinct keys and a count
//! of live registrations, so the registry's bookkeeping is testable).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::SeqCst};

use ferrovia_mr::{MrError, MrRegistry, RegisteredKeys, Registrar};
use ferrovia_types::AccessFlags;

struct Keys(u32, AccessFlags);

// SAFETY: fixed keys reporting the asked-for access; no device or peer
// ever uses them.
unsafe impl RegisteredKeys for Keys {
    fn lkey(&self) -> u32 {
        self.0
    }
    fn rkey(&self) -> u32 {
        self.0
    }
    fn access(&self) -> AccessFlags {
        self.1
    }
}

/// A registrar that needs no device.
pub struct NoDevice;

// SAFETY: never allocates; reports exactly the asked-for access.
unsafe impl Registrar for NoDevice {
    unsafe fn register(
        &self,
        _: *mut u8,
        _: usize,
        _: Option<u64>,
        access: AccessFlags,
    ) -> Result<Box<dyn RegisteredKeys>, MrError> {
        Ok(Box::new(Keys(1, access)))
    }
}

/// A registry over [`NoDevice`].
pub fn registry() -> MrRegistry {
    MrRegistry::with_registrar(NoDevice)
}

/// A registrar handing out a distinct key per registration and counting
/// the live ones.
#[derive(Clone, Default)]
pub struct FakeRegistrar {
    /// Registrations made and not yet dropped.
    pub live: Arc<AtomicUsize>,
    next_key: Arc<AtomicU32>,
}

struct FakeKeys {
    key: u32,
    access: AccessFlags,
    live: Arc<AtomicUsize>,
}

// SAFETY: the keys report exactly the access asked for and never change;
// no device or peer ever uses them.
unsafe impl RegisteredKeys for FakeKeys {
    fn lkey(&self) -> u32 {
        self.key
    }
    fn rkey(&self) -> u32 {
        self.key | 0x8000_0000
    }
    fn access(&self) -> AccessFlags {
        self.access
    }
}

impl Drop for FakeKeys {
    fn drop(&mut self) {
        self.live.fetch_sub(1, SeqCst);
    }
}

// SAFETY: never allocates; reports exactly the asked-for access.
unsafe impl Registrar for FakeRegistrar {
    unsafe fn register(
        &self,
        _addr: *mut u8,
        len: usize,
        _iova: Option<u64>,
        access: AccessFlags,
    ) -> Result<Box<dyn RegisteredKeys>, MrError> {
        assert!(
            len > 0,
            "the registry must refuse zero lengths before registering"
        );
        self.live.fetch_add(1, SeqCst);
        Ok(Box::new(FakeKeys {
            key: self.next_key.fetch_add(1, SeqCst) + 1,
            access,
            live: self.live.clone(),
        }))
    }

    /// Fake keys for a dma-buf (the fd is not looked at): for the
    /// registry's bookkeeping of device memory.
    fn register_dmabuf(
        &self,
        _fd: std::os::fd::BorrowedFd<'_>,
        _offset: u64,
        len: usize,
        _iova: u64,
        access: AccessFlags,
    ) -> Result<Box<dyn RegisteredKeys>, MrError> {
        // SAFETY: fake keys touch no memory.
        unsafe { self.register(std::ptr::null_mut(), len, None, access) }
    }
}
