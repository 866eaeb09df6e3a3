//! A registry load shared by mr's host test (over `FakeRegistrar`) and
//! the verbs device test (real `ibv_reg_mr`).

use ferrovia_mr::{MrError, MrRegistry, RegisterOptions};

/// Eight threads register `bufs` buffers each and look each up `lookups`
/// times (plus one miss each), through one registry: the counters come out
/// exact and every registration is gone at the end. Shared by the host
/// test (registrar double) and the device test (real `ibv_reg_mr`).
pub fn eight_threads_register_and_look_up(reg: &MrRegistry, bufs: usize, lookups: usize) {
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
