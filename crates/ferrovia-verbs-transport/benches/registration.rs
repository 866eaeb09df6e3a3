//! `reg_mr_vs_hit`: a real `ibv_reg_mr` + dereg of 64 KiB against a
//! registry hit; needs a device (`cargo xtask vm -- cargo bench -p
//! ferrovia-verbs-transport --bench registration`).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use ferrovia_mr::RegisterOptions;
use ferrovia_verbs::{AccessFlags, Context, MemoryRegion, ProtectionDomain};
use ferrovia_verbs_transport::registry;

fn reg_mr_vs_hit(c: &mut Criterion) {
    let Ok(ctx) = Context::open_default() else {
        println!(
            "reg_mr_vs_hit: no RDMA device here; run it in the VM: cargo xtask vm -- cargo bench -p ferrovia-verbs-transport --bench registration"
        );
        return;
    };
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let mut mem = vec![0u8; 1 << 16];
    c.bench_function("reg_mr_vs_hit/ibv_reg_mr+dereg_64KiB", |b| {
        b.iter(|| {
            // SAFETY: `mem` outlives the region, which drops right away.
            let mr = unsafe {
                MemoryRegion::register(&pd, mem.as_mut_ptr(), mem.len(), AccessFlags::LOCAL_WRITE)
            };
            black_box(mr.unwrap().lkey())
        })
    });
    let reg = registry(&pd);
    let held = reg
        .register_buffer(vec![0u8; 1 << 16], RegisterOptions::local())
        .unwrap();
    let addr = held.as_ptr() as usize;
    c.bench_function("reg_mr_vs_hit/registry_hit_64KiB", |b| {
        b.iter(|| black_box(reg.view(black_box(addr), 1 << 16).unwrap()))
    });
}

criterion_group!(benches, reg_mr_vs_hit);
criterion_main!(benches);
