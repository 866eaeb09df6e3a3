//! The registry's bookkeeping, on the host, through a registrar double.

use std::sync::atomic::Ordering::SeqCst;

use ferrovia_mr::{MrError, MrRegistry, RegisterOptions};
use ferrovia_testkit::FakeRegistrar;

fn registry() -> (MrRegistry, FakeRegistrar) {
    let fake = FakeRegistrar::default();
    (MrRegistry::with_registrar(fake.clone()), fake)
}

#[test]
fn views_by_virtual_address_and_zero_based_rdma_addresses() {
    let (reg, _) = registry();
    let buf = reg
        .alloc(
            1 << 20,
            RegisterOptions::local().allow_remote_write().zero_based(),
        )
        .unwrap();
    assert_eq!(buf.addr() % ferrovia_types::page_size(), 0);
    assert!(buf.to_vec().iter().all(|&b| b == 0));
    let base = buf.addr();
    let v = reg.view(base + 0x1_0000, 4096).unwrap();
    assert_eq!(v.virtual_addr, base + 0x1_0000);
    assert_eq!(v.rdma_addr, 0x1_0000);
    assert_eq!(v.size, 4096);
    assert_eq!(v.id, buf.registration().id());
    assert_eq!(v.lkey, buf.registration().lkey());
    let remote = buf.registration().remote().unwrap();
    assert_eq!((remote.addr(), remote.len()), (0, 1 << 20));
    let whole = reg.view(buf.addr(), buf.len()).unwrap();
    assert_eq!(whole, buf.registration().view());
}

#[test]
fn bad_ranges_are_typed_errors() {
    let (reg, _) = registry();
    let mut mem = vec![0u8; 8192];
    let base = mem.as_mut_ptr();
    // Two adjacent registrations over one allocation.
    // SAFETY: `mem` outlives both handles (dropped at the end of the test).
    let (a, b) = unsafe {
        (
            reg.register_raw(base, 4096, RegisterOptions::local())
                .unwrap(),
            reg.register_raw(base.add(4096), 4096, RegisterOptions::local())
                .unwrap(),
        )
    };
    let base = base as usize;
    assert!(matches!(reg.view(base, 0), Err(MrError::ZeroLength { .. })));
    assert!(matches!(
        reg.view(usize::MAX - 4, 10),
        Err(MrError::Overflow { .. })
    ));
    match reg.view(base + 4000, 200) {
        Err(MrError::Straddles { first, second, .. }) => {
            assert_eq!((first, second), (a.id(), b.id()))
        }
        other => panic!("expected Straddles, got {other:?}"),
    }
    match reg.view(base + 8000, 500) {
        Err(MrError::OutOfRange {
            id, offset, size, ..
        }) => assert_eq!((id, offset, size), (b.id(), 3904, 4096)),
        other => panic!("expected OutOfRange, got {other:?}"),
    }
    assert!(matches!(
        reg.view(base + (1 << 40), 1),
        Err(MrError::NotRegistered { .. })
    ));
    assert!(matches!(reg.view(8, 8), Err(MrError::NotRegistered { .. })));
    let stats = reg.stats();
    assert_eq!(stats.hits, 0);
    assert_eq!(
        stats.misses, 4,
        "zero-length and overflow are refused before the lookup"
    );
    assert!(matches!(
        reg.register_buffer(Vec::new(), RegisterOptions::local()),
        Err(MrError::ZeroLength { .. })
    ));
    drop((a, b));
    drop(mem);
}

#[test]
fn overlapping_registrations_pick_the_tightest() {
    let (reg, _) = registry();
    let mut mem = vec![0u8; 1 << 16];
    let p = mem.as_mut_ptr();
    // SAFETY: `mem` outlives the handles.
    let (outer, inner) = unsafe {
        (
            reg.register_raw(p, 1 << 16, RegisterOptions::local())
                .unwrap(),
            reg.register_raw(
                p.add(4096),
                4096,
                RegisterOptions::local().allow_remote_read(),
            )
            .unwrap(),
        )
    };
    assert_ne!(outer.id(), inner.id());
    let addr = p as usize;
    assert_eq!(reg.view(addr + 4096 + 10, 100).unwrap().id, inner.id());
    assert_eq!(
        reg.view(addr + 4000, 200).unwrap().id,
        outer.id(),
        "only the outer one covers it"
    );
    assert_eq!(reg.view(addr + 60_000, 10).unwrap().id, outer.id());
    drop(inner);
    assert_eq!(reg.view(addr + 4096 + 10, 100).unwrap().id, outer.id());
    drop(outer);
    drop(mem);
}

#[test]
fn raw_registrations_are_shared_and_reference_counted() {
    let (reg, fake) = registry();
    let mut mem = vec![0u8; 1 << 16];
    let p = mem.as_mut_ptr();
    // SAFETY: `mem` outlives every handle.
    let first = unsafe {
        reg.register_raw(p, 1 << 16, RegisterOptions::local())
            .unwrap()
    };
    // SAFETY: as above.
    let again = unsafe {
        reg.register_raw(p.add(100), 50, RegisterOptions::local())
            .unwrap()
    };
    assert_eq!(
        first.id(),
        again.id(),
        "a covered range reuses the registration"
    );
    // SAFETY: as above. More access than granted: a new registration.
    let remote = unsafe {
        reg.register_raw(p, 10, RegisterOptions::local().allow_remote_write())
            .unwrap()
    };
    assert_ne!(remote.id(), first.id());
    let s = reg.stats();
    assert_eq!(
        (s.registrations_made, s.live_registrations, s.hits),
        (2, 2, 1)
    );
    assert_eq!(s.registered_bytes, (1 << 16) + 10);
    assert_eq!(fake.live.load(SeqCst), 2);
    drop(first);
    assert_eq!(fake.live.load(SeqCst), 2, "a handle is still alive");
    assert!(reg.view(p as usize + 1000, 10).is_ok());
    drop(again);
    drop(remote);
    assert_eq!(fake.live.load(SeqCst), 0, "the last handle deregisters");
    let s = reg.stats();
    assert_eq!((s.live_registrations, s.registered_bytes), (0, 0));
    assert!(matches!(
        reg.view(p as usize, 1),
        Err(MrError::NotRegistered { .. })
    ));
    drop(mem);
}

#[test]
fn remote_descriptors_need_remote_access() {
    let (reg, _) = registry();
    let local = reg
        .register_buffer(vec![1u8; 64], RegisterOptions::local())
        .unwrap();
    assert!(matches!(
        local.registration().remote(),
        Err(MrError::AccessNotGranted { .. })
    ));
    let mut slice_mem = [0u8; 32];
    {
        let mut s = reg
            .register_slice(&mut slice_mem, RegisterOptions::local().allow_remote_read())
            .unwrap();
        s[0] = 42;
        assert_eq!(s.registration().remote().unwrap().len(), 32);
        assert_eq!(reg.stats().live_registrations, 2);
    }
    assert_eq!(slice_mem[0], 42);
    assert_eq!(reg.stats().live_registrations, 1);
}

#[test]
fn concurrent_register_and_lookup_keep_counters_exact() {
    let (reg, fake) = registry();
    ferrovia_testkit::eight_threads_register_and_look_up(&reg, 50, 200);
    assert_eq!(fake.live.load(SeqCst), 0);
}

#[test]
fn zero_based_keeps_the_in_page_offset_and_explicit_bases_are_checked() {
    let (reg, _) = registry();
    let page = ferrovia_types::page_size();
    let mut mem = vec![0u8; 3 * page];
    let p = mem.as_mut_ptr();
    let off = page - (p as usize % page) + 100; // 100 bytes into a page
    // SAFETY: `mem` outlives the handles.
    let zb = unsafe {
        reg.register_raw(p.add(off), page, RegisterOptions::local().zero_based())
            .unwrap()
    };
    assert_eq!(zb.rdma_base(), 100);
    assert_eq!(reg.view(p as usize + off + 10, 1).unwrap().rdma_addr, 110);
    // SAFETY: as above.
    let bad =
        unsafe { reg.register_raw(p.add(off), 16, RegisterOptions::local().rdma_base(0x1000)) };
    assert!(
        matches!(bad, Err(MrError::MisalignedRdmaBase { .. })),
        "{bad:?}"
    );
    // SAFETY: as above.
    let good = unsafe {
        reg.register_raw(
            p.add(off),
            16,
            RegisterOptions::local().rdma_base(0x10_0000 + 100),
        )
    };
    assert_eq!(good.unwrap().rdma_base(), 0x10_0000 + 100);
    drop(zb);
    drop(mem);
}

#[test]
fn shared_memory_is_read_and_written_as_words_and_copies() {
    use std::sync::atomic::Ordering::SeqCst;
    let (reg, _) = registry();
    let buf = reg
        .alloc(61, RegisterOptions::local().allow_remote_write())
        .unwrap();
    assert_eq!(buf.len(), 61);
    // Whole words: the last one covers the padding to 64.
    let words = buf.as_atomic_u64s().unwrap();
    assert_eq!(words.len(), 8);
    words[1].store(u64::from_ne_bytes([1, 2, 3, 4, 5, 6, 7, 8]), SeqCst);
    assert_eq!(buf.load_u64(8).unwrap(), words[1].load(SeqCst));
    let mut out = [0u8; 5];
    buf.read_into(10, &mut out).unwrap();
    assert_eq!(out, [3, 4, 5, 6, 7]);
    // A copy across word boundaries leaves the neighbours alone.
    buf.write_from(6, &[0xaa; 12]).unwrap();
    let all = buf.to_vec();
    assert_eq!(all.len(), 61);
    assert_eq!(
        &all[4..20],
        &[
            0, 0, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0, 0
        ]
    );
    buf.store_u64(56, 7).unwrap_err(); // 56 + 8 > 61
    assert!(matches!(buf.load_u64(4), Err(MrError::Misaligned { .. })));
    assert!(matches!(
        buf.read_into(60, &mut [0; 2]),
        Err(MrError::OutOfRange { .. })
    ));
    assert!(matches!(
        buf.write_from(usize::MAX, &[1]),
        Err(MrError::OutOfRange { .. })
    ));
}

#[test]
fn shared_registrations_start_anywhere_and_word_accessors_need_aligned_words() {
    let (reg, _) = registry();
    let mut words = vec![0u64; 4];
    let bytes: &mut [u8] = bytemuck_free_bytes(&mut words);
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = i as u8;
    }
    let opts = RegisterOptions::local().allow_remote_write();
    // An odd start and a length of no whole words: both used to be
    // refused (`Misaligned`, naming the start even when only the length
    // was the problem).
    {
        // SAFETY: the registration is dropped in this test, never leaked.
        let odd = unsafe { reg.register_shared_slice(&mut bytes[1..18], opts) }.unwrap();
        assert_eq!(odd.to_vec(), (1..18).collect::<Vec<u8>>());
        assert!(matches!(
            odd.as_atomic_u64s(),
            Err(MrError::Misaligned { align: 8, .. })
        ));
        match odd.load_u64(0) {
            Err(MrError::Misaligned { addr, align: 8 }) => assert_eq!(addr, odd.addr()),
            other => panic!("expected Misaligned, got {other:?}"),
        }
        // Offset 7 is the aligned word at byte 8 of the backing memory.
        assert_eq!(
            odd.load_u64(7).unwrap(),
            u64::from_ne_bytes([8, 9, 10, 11, 12, 13, 14, 15])
        );
        odd.store_u64(7, u64::from_ne_bytes([0xee; 8])).unwrap();
        // Past the end (7 + 8 fits, 15 + 8 does not).
        assert!(matches!(odd.load_u64(15), Err(MrError::OutOfRange { .. })));
        odd.write_from(0, &[0xa0, 0xa1]).unwrap();
        odd.write_from(15, &[0xb0, 0xb1]).unwrap();
    }
    let mut expected: Vec<u8> = (0..32).collect();
    expected[1..3].copy_from_slice(&[0xa0, 0xa1]);
    expected[8..16].copy_from_slice(&[0xee; 8]);
    expected[16..18].copy_from_slice(&[0xb0, 0xb1]);
    assert_eq!(&bytes[..], &expected[..], "neighbours untouched");
    // An aligned start with a partial last word: the whole words, and the
    // tail bytes by copies only.
    // SAFETY: the registration is dropped in this test, never leaked.
    let tail = unsafe { reg.register_shared_slice(&mut bytes[8..20], opts) }.unwrap();
    assert_eq!(tail.as_atomic_u64s().unwrap().len(), 1);
    assert!(matches!(tail.load_u64(8), Err(MrError::OutOfRange { .. })));
    assert_eq!(tail.to_vec(), &expected[8..20]);
    drop(tail);
    reg.register_slice(&mut bytes[1..12], RegisterOptions::local())
        .unwrap();
}

#[test]
fn into_local_deregisters_the_shared_keys_before_handing_out_bytes() {
    let (reg, fake) = registry();
    let shared = reg
        .alloc(
            4096,
            RegisterOptions::local().allow_remote_write().zero_based(),
        )
        .unwrap();
    shared.store_u64(16, 0x4242).unwrap();
    let old_rkey = shared.registration().rkey();
    // A second handle keeps the rkey alive: refused, buffer handed back.
    let extra = shared.registration().clone();
    let err = shared.into_local(RegisterOptions::local()).unwrap_err();
    assert!(
        matches!(err.error(), MrError::StillShared { handles: 2 }),
        "{err}"
    );
    let shared = err.into_buffer();
    drop(extra);
    assert_eq!(fake.live.load(SeqCst), 1);
    let local = shared.into_local(RegisterOptions::local()).unwrap();
    // One registration left: the new, local one.
    assert_eq!(fake.live.load(SeqCst), 1);
    assert_eq!(reg.stats().live_registrations, 1);
    assert_ne!(local.registration().rkey(), old_rkey);
    assert!(
        local.registration().remote().is_err(),
        "no remote rights left"
    );
    assert_eq!(&local[16..24], &0x4242u64.to_ne_bytes());
    assert_eq!(
        reg.view(local.addr(), 8).unwrap().id,
        local.registration().id()
    );
    drop(local);
    assert_eq!(fake.live.load(SeqCst), 0);
    assert_eq!(reg.stats().live_registrations, 0);
}

/// The bytes of a u64 vector (8-byte aligned), without a dependency.
fn bytemuck_free_bytes(words: &mut [u64]) -> &mut [u8] {
    let len = words.len() * 8;
    // SAFETY: u8 has no alignment or validity requirements; same memory,
    // same exclusive borrow.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
}

#[test]
fn view_descriptors_carry_the_registrations_rights() {
    use ferrovia_types::AccessFlags;
    let (reg, _) = registry();
    // Local-only memory: the view refuses a descriptor as the registration
    // does (it used to claim read, write and atomics).
    let local = reg
        .register_buffer(vec![0u8; 64], RegisterOptions::local())
        .unwrap();
    let view = local.registration().view();
    assert_eq!(view.access, AccessFlags::LOCAL_WRITE);
    assert!(matches!(
        view.remote(),
        Err(MrError::AccessNotGranted {
            what: "a remote descriptor",
            ..
        })
    ));
    assert!(matches!(
        local.registration().view_at(8, 8).unwrap().remote(),
        Err(MrError::AccessNotGranted { .. })
    ));
    assert!(matches!(
        reg.view(local.addr(), 8).unwrap().remote(),
        Err(MrError::AccessNotGranted { .. })
    ));
    // Read-only memory: views found every way claim read only.
    let readable = reg
        .register_buffer(vec![0u8; 64], RegisterOptions::local().allow_remote_read())
        .unwrap();
    let by_lookup = reg.view(readable.addr() + 8, 16).unwrap().remote().unwrap();
    assert_eq!(by_lookup.access(), AccessFlags::REMOTE_READ);
    assert_eq!(
        (by_lookup.len(), by_lookup.addr()),
        (16, readable.addr() as u64 + 8)
    );
    let sub = readable
        .registration()
        .view_at(4, 4)
        .unwrap()
        .remote()
        .unwrap();
    assert_eq!(sub.access(), AccessFlags::REMOTE_READ);
    assert_eq!(
        readable.registration().view().remote().unwrap(),
        readable.registration().remote().unwrap()
    );
    // Write and atomics: the descriptor has both, not read.
    let shared = reg
        .alloc(
            64,
            RegisterOptions::local()
                .allow_remote_write()
                .allow_remote_atomic(),
        )
        .unwrap();
    let rights = reg
        .view(shared.addr(), 64)
        .unwrap()
        .remote()
        .unwrap()
        .access();
    assert_eq!(
        rights,
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC
    );
    assert!(!rights.contains(AccessFlags::REMOTE_READ));
}
