//! ferrovia's own cost of each post and poll path, per request: the real
//! `QueuePair` / `CompletionQueue` path code over a provider double
//! (`provider_double`) that copies each request's descriptor and hands
//! back one completion per request. Classic (`ibv_post_send`,
//! `ibv_poll_cq`) and extended (`ibv_wr_*`, `ibv_start_poll`) side by
//! side. `cargo bench -p ferrovia-verbs --features provider-double
//! --bench post_poll_paths`.

use std::hint::black_box;
use std::mem::MaybeUninit;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferrovia_verbs::provider_double::ProviderDouble;
use ferrovia_verbs::{PollPath, PostPath, SendWr, Sge, WorkCompletion, link_send};

fn paths(c: &mut Criterion) {
    let d = ProviderDouble::new();
    let sges = [Sge::new(0x1000, 64, 5)];
    let mut g = c.benchmark_group("post");
    g.throughput(Throughput::Elements(1));
    for path in [PostPath::Classic, PostPath::Extended] {
        g.bench_function(format!("write_64B_{path:?}"), |b| {
            b.iter(|| {
                let mut wr = SendWr::write(1, black_box(&sges), 0x4000, 9);
                d.post_send(path, &mut wr).unwrap();
            });
        });
        g.bench_function(format!("send_inline_64B_{path:?}"), |b| {
            b.iter(|| {
                let mut wr = SendWr::send(1, black_box(&sges)).inline(true);
                d.post_send(path, &mut wr).unwrap();
            });
        });
    }
    g.throughput(Throughput::Elements(16));
    for path in [PostPath::Classic, PostPath::Extended] {
        g.bench_function(format!("write_list_16x64B_{path:?}"), |b| {
            b.iter(|| {
                let mut wrs: [SendWr<'_>; 16] = std::array::from_fn(|i| {
                    SendWr::write(i as u64, black_box(&sges), 0x4000, 9).signaled(i == 15)
                });
                link_send(&mut wrs);
                d.post_send(path, &mut wrs[0]).unwrap();
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("poll");
    for batch in [1usize, 32] {
        g.throughput(Throughput::Elements(batch as u64));
        for path in [PollPath::Classic, PollPath::Extended] {
            g.bench_function(format!("poll_{batch}_{path:?}"), |b| {
                let mut out = [MaybeUninit::<WorkCompletion>::uninit(); 32];
                let wr_sges = [Sge::new(0x1000, 64, 5)];
                b.iter(|| {
                    // Make `batch` completions available (not timed apart:
                    // the same fixed cost on both paths).
                    for _ in 0..batch {
                        let mut wr = SendWr::write(1, &wr_sges, 0x4000, 9);
                        d.post_send(PostPath::Classic, &mut wr).unwrap();
                    }
                    let got = d.poll(path, &mut out[..batch]).unwrap();
                    assert_eq!(got.len(), batch);
                    black_box(got[batch - 1].wr_id());
                });
            });
        }
    }
    g.finish();
}

criterion_group!(benches, paths);
criterion_main!(benches);
