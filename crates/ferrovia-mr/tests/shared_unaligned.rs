#![cfg_attr(miri, allow(dead_code))]
//! Shared memory at any start: a `Vec<u8>` need not be 8-byte aligned
//! (its allocation asks for alignment 1), so this binary's allocator
//! hands every alignment-1 allocation out at an odd address, making the
//! case deterministic. Slices of aligned memory at every shift check the
//! copies exhaustively (those also run under Miri, which the allocator's
//! trick upsets: `cargo +nightly miri test -p ferrovia-mr --test
//! shared_unaligned`).

use std::alloc::{GlobalAlloc, Layout, System};

use ferrovia_mr::{MrError, MrRegistry, RegisterOptions};
use ferrovia_testkit::FakeRegistrar;

/// Alignment-1 allocations one byte into a `System` block (which is at
/// least 8-byte aligned), so they start at an odd address.
struct OddBytes;

/// The `System` layout behind an alignment-1 layout: one byte more, and
/// aligned to 8 so that one byte in is odd.
fn widened(layout: Layout) -> Layout {
    Layout::from_size_align(layout.size() + 1, 8).expect("a test allocation fits")
}

// SAFETY: every block comes from `System` and goes back to it with the
// layout it was allocated with; alignment-1 blocks are shifted by one byte
// each way, which alignment 1 allows.
unsafe impl GlobalAlloc for OddBytes {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() != 1 {
            // SAFETY: forwarded with the caller's (non-zero-size) layout.
            return unsafe { System.alloc(layout) };
        }
        // SAFETY: the widened layout has a non-zero size.
        let p = unsafe { System.alloc(widened(layout)) };
        if p.is_null() {
            return p;
        }
        // Exposed, so `dealloc` can step back before the pointer it gets,
        // whose provenance covers only what it handed out.
        let _ = p.expose_provenance();
        // SAFETY: the block has size + 1 bytes.
        unsafe { p.add(1) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.align() != 1 {
            // SAFETY: allocated by `System` with this layout.
            return unsafe { System.dealloc(ptr, layout) };
        }
        let block = std::ptr::with_exposed_provenance_mut::<u8>(ptr.addr() - 1);
        // SAFETY: `ptr` is one byte into a block allocated with the widened
        // layout, whose provenance `alloc` exposed.
        unsafe { System.dealloc(block, widened(layout)) }
    }
}

#[cfg(not(miri))]
#[global_allocator]
static ODD: OddBytes = OddBytes;

fn registry() -> MrRegistry {
    MrRegistry::with_registrar(FakeRegistrar::default())
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
#[cfg_attr(miri, ignore = "the odd allocator is off under Miri")]
fn a_vec_at_an_odd_address_registers_as_shared() {
    let reg = registry();
    let bytes = pattern(64, 1);
    assert_eq!(
        bytes.as_ptr() as usize % 2,
        1,
        "the allocator hands out odd addresses"
    );
    let buf = reg
        .register_buffer(bytes.clone(), RegisterOptions::local().allow_remote_write())
        .unwrap();
    assert_eq!(buf.addr() % 8, 1);
    assert_eq!(buf.to_vec(), bytes);
    assert_eq!(buf.registration().addr(), buf.addr());
}

/// `len` bytes `shift` bytes into aligned memory, checked against a
/// model after every read and write of every in-range offset and length;
/// the bytes around them stay as they were.
fn every_offset_and_length(shift: usize, len: usize) {
    let reg = registry();
    let mut backing = vec![0u64; (shift + len).div_ceil(8) + 1];
    let bytes = bytes_of(&mut backing);
    let start = pattern(len, len as u8);
    bytes[shift..shift + len].copy_from_slice(&start);
    // SAFETY: the registration is dropped in this test, never leaked.
    let buf = unsafe {
        reg.register_shared_slice(
            &mut bytes[shift..shift + len],
            RegisterOptions::local().allow_remote_write(),
        )
    }
    .unwrap();
    assert_eq!(buf.addr() % 8, shift % 8);
    let mut model = start;
    assert_eq!(buf.to_vec(), model);
    let mut seed = 0u8;
    for offset in 0..len {
        for n in 1..=len - offset {
            let mut out = vec![0u8; n];
            buf.read_into(offset, &mut out).unwrap();
            assert_eq!(out, model[offset..offset + n], "read {offset}+{n} of {len}");
            seed = seed.wrapping_add(1);
            let src = pattern(n, seed);
            buf.write_from(offset, &src).unwrap();
            model[offset..offset + n].copy_from_slice(&src);
            assert_eq!(buf.to_vec(), model, "write {offset}+{n} of {len}");
        }
    }
    assert!(matches!(
        buf.read_into(len - 1, &mut [0; 2]),
        Err(MrError::OutOfRange { .. })
    ));
    assert!(matches!(
        buf.write_from(len, &[1]),
        Err(MrError::OutOfRange { .. })
    ));
    drop(buf);
    assert_eq!(&bytes[shift..shift + len], &model[..]);
    assert!(
        bytes[..shift].iter().all(|&b| b == 0),
        "bytes before untouched"
    );
    assert!(
        bytes[shift + len..].iter().all(|&b| b == 0),
        "bytes after untouched"
    );
}

/// The bytes of a u64 vector (8-byte aligned), without a dependency.
fn bytes_of(words: &mut [u64]) -> &mut [u8] {
    let len = words.len() * 8;
    // SAFETY: u8 has no alignment or validity requirements; same memory,
    // same exclusive borrow.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
}

#[test]
fn copies_work_at_every_offset_and_length_from_every_start() {
    // Shorter than a head, a head and a tail, whole words between.
    let lens: &[usize] = if cfg!(miri) {
        &[1, 7, 9, 19]
    } else {
        &[1, 3, 7, 8, 9, 16, 23, 40, 61]
    };
    for shift in 0..8 {
        for &len in lens {
            every_offset_and_length(shift, len);
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "the odd allocator is off under Miri")]
fn word_accessors_refuse_unaligned_words_with_a_typed_error() {
    let reg = registry();
    let buf = reg
        .register_buffer(
            vec![0u8; 61],
            RegisterOptions::local().allow_remote_atomic(),
        )
        .unwrap();
    let addr = buf.addr();
    assert_eq!(addr % 8, 1);
    match buf.as_atomic_u64s() {
        Err(MrError::Misaligned { addr: a, align: 8 }) => assert_eq!(a, addr),
        other => panic!("expected Misaligned, got {other:?}"),
    }
    for offset in (0..61).filter(|o| !(addr + o).is_multiple_of(8)) {
        assert!(
            matches!(
                buf.load_u64(offset),
                Err(MrError::Misaligned { .. }) | Err(MrError::OutOfRange { .. })
            ),
            "offset {offset}"
        );
        assert!(buf.store_u64(offset, 1).is_err());
    }
    // The aligned words: offsets 7, 15, ..., 47 (55 + 8 > 61).
    let aligned: Vec<usize> = (0..61)
        .filter(|o| (addr + o).is_multiple_of(8) && o + 8 <= 61)
        .collect();
    assert_eq!(aligned, [7, 15, 23, 31, 39, 47]);
    for &o in &aligned {
        buf.store_u64(o, 0x0101_0101_0101_0101 * (o as u64))
            .unwrap();
    }
    for &o in &aligned {
        assert_eq!(buf.load_u64(o).unwrap(), 0x0101_0101_0101_0101 * (o as u64));
        let w = buf.atomic_u64(o).unwrap();
        assert_eq!(w as *const _ as usize, addr + o);
    }
    let all = buf.to_vec();
    assert_eq!(&all[..7], &[0; 7], "the head is untouched");
    assert_eq!(&all[55..], &[0; 6], "the tail is untouched");
    assert_eq!(&all[7..15], &[7; 8]);
}

#[test]
#[cfg_attr(miri, ignore = "the odd allocator is off under Miri")]
fn into_local_keeps_the_bytes_of_an_odd_start() {
    let reg = registry();
    let buf = reg
        .register_buffer(vec![0u8; 20], RegisterOptions::local().allow_remote_write())
        .unwrap();
    buf.write_from(0, &pattern(20, 9)).unwrap();
    let local = buf.into_local(RegisterOptions::local()).unwrap();
    assert_eq!(local.addr() % 2, 1);
    assert_eq!(&local[..], &pattern(20, 9)[..]);
}

#[test]
fn racing_copies_see_only_written_bytes() {
    // Two writers copy whole buffers of one value each at overlapping
    // offsets, a reader copies it all: the reader sees, byte by byte, only
    // values written. Every byte is reached at one size (a head and tail
    // as bytes, whole words as words, partial words by compare-and-swap),
    // so these races are atomic ones of one size (Miri checks that).
    let reg = registry();
    let mut backing = vec![0u64; 8];
    let bytes = bytes_of(&mut backing);
    // SAFETY: the registration is dropped in this test, never leaked.
    let buf = unsafe {
        reg.register_shared_slice(
            &mut bytes[3..48],
            RegisterOptions::local().allow_remote_write(),
        )
    }
    .unwrap();
    let rounds = if cfg!(miri) { 20 } else { 2000 };
    std::thread::scope(|s| {
        for (v, at) in [(0x11u8, 0), (0x22, 2)] {
            let buf = &buf;
            s.spawn(move || {
                for _ in 0..rounds {
                    buf.write_from(at, &[v; 40]).unwrap();
                }
            });
        }
        let buf = &buf;
        s.spawn(move || {
            for _ in 0..rounds {
                let seen = buf.to_vec();
                assert!(seen.iter().all(|b| [0, 0x11, 0x22].contains(b)), "{seen:?}");
            }
        });
    });
    let last = buf.to_vec();
    assert!(last[..42].iter().all(|b| [0x11, 0x22].contains(b)));
    assert_eq!(&last[42..], &[0; 3]);
}
