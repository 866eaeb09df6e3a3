//! A registrar test double: hands out distinct keys and counts live
//! registrations, so the registry's bookkeeping is testable without a
//! device.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::SeqCst};

use ferrovia_mr::{MrError, RegisteredKeys, Registrar};
use ferrovia_types::AccessFlags;

#[derive(Clone, Default)]
pub struct FakeRegistrar {
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
}

/// Eight threads register `bufs` buffers each and look each up `lookups`
/// times (plus one miss each), through one registry: the counters come out
/// exact and every registration is gone at the end. Shared by the host
/// test (registrar double) and the device test (real `ibv_reg_mr`).
pub fn eight_threads_register_and_look_up(
    reg: &ferrovia_mr::MrRegistry,
    bufs: usize,
    lookups: usize,
) {
    use ferrovia_mr::RegisterOptions;
    const THREADS: usize = 8;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let reg = reg.clone();
            s.spawn(move || {
                let mine: Vec<_> = (0..bufs)
                    .map(|i| {
                        reg.register_buffer(vec![t as u8; 256 + i], RegisterOptions::local())
                            .unwrap()
                    })
                    .collect();
                for i in 0..lookups {
                    let b = &mine[i % bufs];
                    let v = reg.view(b.addr() + 1, 10).unwrap();
                    assert_eq!(
                        (v.id, v.lkey),
                        (b.registration().id(), b.registration().lkey())
                    );
                }
                assert!(matches!(reg.view(8, 8), Err(MrError::NotRegistered { .. })));
            });
        }
    });
    let s = reg.stats();
    assert_eq!(s.registrations_made, (THREADS * bufs) as u64);
    assert_eq!(s.hits, (THREADS * lookups) as u64);
    assert_eq!(s.misses, THREADS as u64);
    assert_eq!((s.live_registrations, s.registered_bytes), (0, 0));
}
