//! Lookups among many and overlapping registrations: nested ones, the
//! longest one going away, many with one start, views at the edges.

use std::sync::atomic::Ordering::SeqCst;

use ferrovia_mr::{MrError, MrRegistry, RegisterOptions, Registration};
use ferrovia_testkit::FakeRegistrar;

fn registry() -> (MrRegistry, FakeRegistrar) {
    let fake = FakeRegistrar::default();
    (MrRegistry::with_registrar(fake.clone()), fake)
}

/// `len` bytes at `offset` into `mem`, registered anew (zero-based, so
/// never served by an existing registration).
fn fresh(reg: &MrRegistry, mem: &mut [u8], offset: usize, len: usize) -> Registration<'static> {
    assert!(offset + len <= mem.len());
    // SAFETY: every test keeps `mem` alive until its handles are dropped.
    unsafe {
        reg.register_raw(
            mem.as_mut_ptr().add(offset),
            len,
            RegisterOptions::local().zero_based(),
        )
    }
    .unwrap()
}

#[test]
fn removing_the_longest_registration_keeps_lookups_exact() {
    let (reg, fake) = registry();
    let mut mem = vec![0u8; 64 * 4096];
    let base = mem.as_ptr() as usize;
    let arena = fresh(&reg, &mut mem, 0, 64 * 4096);
    let pages: Vec<_> = (0..64)
        .map(|i| fresh(&reg, &mut mem, i * 4096, 4096))
        .collect();
    let half = fresh(&reg, &mut mem, 0, 32 * 4096);
    // Inside a page: the page; across two pages: the tightest that holds
    // both (the half, then the arena).
    assert_eq!(reg.view(base + 5 * 4096 + 8, 64).unwrap().id, pages[5].id());
    assert_eq!(reg.view(base + 5 * 4096 - 8, 64).unwrap().id, half.id());
    assert_eq!(reg.view(base + 40 * 4096 - 8, 64).unwrap().id, arena.id());
    let v = reg.view(base + 40 * 4096 - 8, 64).unwrap();
    assert_eq!(
        v.rdma_addr,
        arena.rdma_base() as usize + 40 * 4096 - 8,
        "zero-based within the arena"
    );
    // The longest goes.
    drop(arena);
    assert_eq!(reg.view(base + 5 * 4096 - 8, 64).unwrap().id, half.id());
    match reg.view(base + 40 * 4096 - 8, 64) {
        Err(MrError::Straddles { first, second, .. }) => {
            assert_eq!((first, second), (pages[39].id(), pages[40].id()))
        }
        other => panic!("expected Straddles, got {other:?}"),
    }
    assert_eq!(
        reg.view(base + 63 * 4096, 4096).unwrap().id,
        pages[63].id(),
        "the last page is found with the arena gone"
    );
    // Then the next longest.
    drop(half);
    match reg.view(base + 5 * 4096 - 8, 64) {
        Err(MrError::Straddles { first, second, .. }) => {
            assert_eq!((first, second), (pages[4].id(), pages[5].id()))
        }
        other => panic!("expected Straddles, got {other:?}"),
    }
    drop(pages);
    assert!(matches!(
        reg.view(base, 1),
        Err(MrError::NotRegistered { .. })
    ));
    assert_eq!(fake.live.load(SeqCst), 0);
    assert_eq!(reg.stats().live_registrations, 0);
    drop(mem);
}

#[test]
fn many_registrations_with_one_start_pick_the_shortest_that_covers() {
    let (reg, _) = registry();
    let mut mem = vec![0u8; 300 * 64];
    let base = mem.as_ptr() as usize;
    // Lengths 64 * (1..=300), registered in a scrambled order.
    let mut regs: Vec<(usize, Registration<'static>)> = (0..300usize)
        .map(|i| (i * 7 % 300 + 1) * 64)
        .map(|len| (len, fresh(&reg, &mut mem, 0, len)))
        .collect();
    // And a second one of length 128: equally short, larger id.
    let twin = fresh(&reg, &mut mem, 0, 128);
    let id_of = |regs: &[(usize, Registration<'static>)], len: usize| {
        regs.iter().find(|(l, _)| *l == len).map(|(_, r)| r.id())
    };
    for want in [1usize, 64, 65, 128, 129, 5000, 300 * 64] {
        let expect = id_of(&regs, want.div_ceil(64) * 64);
        assert_eq!(reg.view(base, want).ok().map(|v| v.id), expect, "{want}");
    }
    assert!(id_of(&regs, 128) < Some(twin.id()));
    // Beyond the longest: out of range of the only one holding its first
    // byte.
    match reg.view(base + 300 * 64 - 1, 2) {
        Err(MrError::OutOfRange { id, size, .. }) => {
            assert_eq!((Some(id), size), (id_of(&regs, 300 * 64), 300 * 64))
        }
        other => panic!("expected OutOfRange, got {other:?}"),
    }
    // Drop every other one, the longest first, and ask again.
    regs.sort_by_key(|(len, _)| std::cmp::Reverse(*len));
    let kept: Vec<_> = regs
        .into_iter()
        .enumerate()
        .filter_map(|(i, r)| (i % 2 == 1).then_some(r))
        .collect();
    for want in [1usize, 64, 65, 129, 200 * 64] {
        let expect = kept
            .iter()
            .filter(|(len, _)| *len >= want)
            .map(|(len, r)| (*len, r.id()))
            .chain((want <= 128).then(|| (128, twin.id())))
            .min()
            .map(|(_, id)| id);
        assert_eq!(reg.view(base, want).ok().map(|v| v.id), expect, "{want}");
    }
    assert_eq!(reg.stats().live_registrations, 151);
    drop((kept, twin));
    drop(mem);
}

#[test]
fn views_at_the_edges_of_nested_registrations() {
    let (reg, _) = registry();
    let mut mem = vec![0u8; 3 * 4096];
    let base = mem.as_ptr() as usize;
    let outer = fresh(&reg, &mut mem, 1024, 2 * 4096);
    let inner = fresh(&reg, &mut mem, 4096, 1024);
    let (o, i) = (base + 1024, base + 4096);
    let id = |addr, len| reg.view(addr, len).map(|v| v.id);
    // The inner one's first and last bytes, and all of it.
    assert_eq!(id(i, 1).unwrap(), inner.id());
    assert_eq!(id(i + 1023, 1).unwrap(), inner.id());
    assert_eq!(id(i, 1024).unwrap(), inner.id());
    // Just outside it, on either side, or reaching past it: the outer.
    assert_eq!(id(i - 1, 1).unwrap(), outer.id());
    assert_eq!(id(i + 1024, 1).unwrap(), outer.id());
    assert_eq!(id(i - 1, 2).unwrap(), outer.id());
    assert_eq!(id(i, 1025).unwrap(), outer.id());
    // The outer one's edges.
    assert_eq!(id(o, 2 * 4096).unwrap(), outer.id());
    assert_eq!(id(o + 2 * 4096 - 1, 1).unwrap(), outer.id());
    assert!(matches!(
        reg.view(o - 1, 1),
        Err(MrError::NotRegistered { .. })
    ));
    assert!(matches!(
        reg.view(o + 2 * 4096, 1),
        Err(MrError::NotRegistered { .. })
    ));
    // Starting inside, reaching past the outer's end: out of range of the
    // one holding the first byte with the nearest start.
    match reg.view(i + 10, 2 * 4096) {
        Err(MrError::OutOfRange {
            id, offset, size, ..
        }) => assert_eq!((id, offset, size), (inner.id(), 10, 1024)),
        other => panic!("expected OutOfRange, got {other:?}"),
    }
    match reg.view(o + 10, 2 * 4096) {
        Err(MrError::OutOfRange {
            id, offset, size, ..
        }) => assert_eq!((id, offset, size), (outer.id(), 10, 2 * 4096)),
        other => panic!("expected OutOfRange, got {other:?}"),
    }
    // Reaching in from before the outer's start: nothing holds the first
    // byte.
    assert!(matches!(
        reg.view(o - 1, 100),
        Err(MrError::NotRegistered { .. })
    ));
    drop((inner, outer));
    drop(mem);
}

#[test]
fn many_live_registrations_in_any_order() {
    let (reg, fake) = registry();
    const N: usize = 20_000;
    let mut mem = vec![0u8; N * 64];
    let base = mem.as_ptr() as usize;
    let mut held: Vec<_> = mem
        .chunks_mut(64)
        .map(|c| reg.register_slice(c, RegisterOptions::local()).unwrap())
        .collect();
    assert_eq!(reg.stats().live_registrations, N as u64);
    // A raw registration inside one of them is a hit.
    // SAFETY: `mem` outlives the handle (dropped below).
    let hit = unsafe {
        reg.register_raw(
            (base + 777 * 64 + 8) as *mut u8,
            8,
            RegisterOptions::local(),
        )
    }
    .unwrap();
    assert_eq!(hit.id(), held[777].registration().id());
    drop(hit);
    // Drop them in a scrambled order, checking lookups of the rest.
    let mut order: Vec<usize> = (0..N).map(|i| i * 7919 % N).collect();
    order.dedup();
    assert_eq!(order.len(), N);
    let mut slots: Vec<_> = held.drain(..).map(Some).collect();
    for (k, &i) in order.iter().enumerate() {
        slots[i] = None;
        if k % 997 == 0 {
            assert!(matches!(
                reg.view(base + i * 64, 64),
                Err(MrError::NotRegistered { .. })
            ));
            if let Some(j) = (0..N).find(|&j| slots[j].is_some()) {
                let r = slots[j].as_ref().unwrap().registration();
                assert_eq!(reg.view(base + j * 64 + 63, 1).unwrap().id, r.id());
            }
        }
    }
    let s = reg.stats();
    assert_eq!((s.live_registrations, s.registered_bytes), (0, 0));
    assert_eq!(fake.live.load(SeqCst), 0);
}
