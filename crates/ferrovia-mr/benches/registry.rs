//! Registry and wire-form benchmarks.
//!
//! - `view_lookup/10000`: a view lookup in a registry of 10,000
//!   registrations (bookkeeping measured through the registrar double, so
//!   it runs anywhere; the lookup path is the same code).
//! - `view_lookup_nested/10000`: the same inside one arena registration
//!   that also holds the 10,000 (every view has two covering
//!   registrations; the tighter one wins).
//! - `register_drop/{1000,10000,100000}`: register one more 64-byte
//!   slice and drop it, with that many registrations live (through the
//!   registrar double, so it measures the registry's bookkeeping, not the
//!   kernel). The slices interleave with the live ones, so each lands in
//!   the middle of the table, not at its end.
//! - `wire/encode`, `wire/decode`: the `RemoteMemoryRegion` wire form.
//!
//! The real `ibv_reg_mr` against a registry hit is in
//! ferrovia-verbs-transport's `registration` bench.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use ferrovia_mr::{MrRegistry, RegisterOptions, RemoteMemoryRegion};

fn view_lookup(c: &mut Criterion) {
    let reg = MrRegistry::with_registrar(ferrovia_testkit::FakeRegistrar::default());
    let bufs: Vec<_> = (0..10_000)
        .map(|_| {
            reg.register_buffer(vec![0u8; 4096], RegisterOptions::local())
                .unwrap()
        })
        .collect();
    let addrs: Vec<usize> = bufs.iter().map(|b| b.as_ptr() as usize + 100).collect();
    let mut i = 0usize;
    c.bench_function("view_lookup/10000", |b| {
        b.iter(|| {
            // Stride through the registrations so the lookup is not one
            // hot cache line.
            i = (i + 7919) % addrs.len();
            black_box(reg.view(black_box(addrs[i]), 64).unwrap())
        })
    });
}

fn view_lookup_nested(c: &mut Criterion) {
    let reg = MrRegistry::with_registrar(ferrovia_testkit::FakeRegistrar::default());
    let mut arena = vec![0u8; 10_000 * 256];
    let base = arena.as_mut_ptr();
    // SAFETY: `arena` outlives every handle (they drop before it, below).
    let whole = unsafe { reg.register_raw(base, arena.len(), RegisterOptions::local()) }.unwrap();
    let held: Vec<_> = (0..10_000)
        .map(|i| {
            // SAFETY: as above; more access than the arena's, so each is a
            // registration of its own.
            unsafe {
                reg.register_raw(
                    base.add(i * 256),
                    256,
                    RegisterOptions::local().allow_remote_read(),
                )
            }
            .unwrap()
        })
        .collect();
    let mut i = 0usize;
    c.bench_function("view_lookup_nested/10000", |b| {
        b.iter(|| {
            i = (i + 7919) % held.len();
            black_box(reg.view(black_box(held[i].addr() + 100), 64).unwrap())
        })
    });
    assert_eq!(reg.view(held[5].addr(), 1).unwrap().id, held[5].id());
    drop((held, whole));
    drop(arena);
}

fn register_drop(c: &mut Criterion) {
    let mut group = c.benchmark_group("register_drop");
    for live in [1_000usize, 10_000, 100_000] {
        let reg = MrRegistry::with_registrar(ferrovia_testkit::FakeRegistrar::default());
        // Even chunks are registered and stay live; the bench registers and
        // drops the odd ones, strided so consecutive iterations land far
        // apart in the table.
        let mut arena = vec![0u8; 2 * live * 64];
        let mut chunks: Vec<&mut [u8]> = arena.chunks_mut(64).collect();
        let mut free = Vec::with_capacity(live);
        let mut held = Vec::with_capacity(live);
        for (i, chunk) in chunks.drain(..).enumerate() {
            if i % 2 == 0 {
                held.push(reg.register_slice(chunk, RegisterOptions::local()).unwrap());
            } else {
                free.push(chunk);
            }
        }
        let mut i = 0usize;
        group.bench_function(live.to_string(), |b| {
            b.iter(|| {
                i = (i + 7919) % free.len();
                let s = reg
                    .register_slice(&mut *free[i], RegisterOptions::local())
                    .unwrap();
                black_box(s.registration().lkey())
            })
        });
        assert_eq!(reg.stats().live_registrations, live as u64);
        drop(held);
    }
    group.finish();
}

fn wire(c: &mut Criterion) {
    let r = RemoteMemoryRegion::new(0x7f12_3456_7000, 1 << 20, 0x1234_5678).unwrap();
    let bytes = r.encode();
    let mut buf = [0u8; ferrovia_mr::WIRE_MAX_LEN];
    c.bench_function("wire/encode", |b| {
        b.iter(|| black_box(r).encode_into(&mut buf).len())
    });
    c.bench_function("wire/decode", |b| {
        b.iter(|| RemoteMemoryRegion::decode(black_box(&bytes)))
    });
}

criterion_group!(
    benches,
    view_lookup,
    view_lookup_nested,
    register_drop,
    wire
);
criterion_main!(benches);
