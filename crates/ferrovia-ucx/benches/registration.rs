//! Registration cost over UCX (tcp, on the host, no device needed).
//!
//! - `alloc_register/{1000,10000}`: `MrRegistry::alloc` of 64 bytes (UCX
//!   allocates the memory with `ucp_mem_map`, and the registration finds
//!   that allocation by address) and its drop, with that many such
//!   allocations live. The bookkeeping must not grow with them; what
//!   remains is UCX's own mapping and unmapping.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use ferrovia_mr::{MrRegistry, RegisterOptions};
use ferrovia_ucx::{UcxContext, UcxTransport};

fn alloc_register(c: &mut Criterion) {
    let ctx = UcxContext::with_options(&[("TLS", "tcp")]).expect("ucp_init over tcp");
    let mut group = c.benchmark_group("alloc_register");
    for live in [1_000usize, 10_000] {
        let transport = UcxTransport::new(&ctx).expect("transport");
        let reg = MrRegistry::with_registrar(transport.registrar());
        let held: Vec<_> = (0..live)
            .map(|_| reg.alloc(64, RegisterOptions::local()).expect("alloc"))
            .collect();
        group.bench_function(live.to_string(), |b| {
            b.iter(|| {
                let buf = reg.alloc(64, RegisterOptions::local()).expect("alloc");
                black_box(buf.registration().lkey())
            })
        });
        assert_eq!(reg.stats().live_registrations, live as u64);
        drop(held);
    }
    group.finish();
}

criterion_group!(benches, alloc_register);
criterion_main!(benches);
