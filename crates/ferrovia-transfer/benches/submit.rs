//! The software cost per entry of submitting a prepared list and waiting
//! for it, through a transport double that only counts (criterion): the
//! transfer layer's work and the channel core's, nothing of a device's.
//! The goal: at most 40 ns an entry, within 1.5x from 1,000 to 1,000,000
//! entries. One rail and two, 64-byte entries to one peer.

use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ferrovia_channel::ChannelConfig;
use ferrovia_channel::transport::Transport;
use ferrovia_mr::RegisterOptions;
use ferrovia_testkit::{Counting, registry};
use ferrovia_transfer::{DescriptorList, Op, RemoteSegment, TransferEngine};

const ENTRY: usize = 64;

fn engine(rails: usize) -> TransferEngine {
    let transports: Vec<Arc<dyn Transport>> = (0..rails)
        .map(|_| Counting::new(1, 4096) as Arc<dyn Transport>)
        .collect();
    TransferEngine::builder()
        .channel(ChannelConfig::default())
        .over_rails(0, 1, transports, (0..rails).map(|_| registry()).collect())
        .expect("engine over the double")
}

fn submit(c: &mut Criterion) {
    let mut group = c.benchmark_group("submit_prepared");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(4));
    for rails in [1, 2] {
        let engine = engine(rails);
        for entries in [1_000usize, 10_000, 100_000, 1_000_000] {
            let mut seg = engine
                .alloc(entries * ENTRY, RegisterOptions::local())
                .unwrap();
            let target = engine
                .alloc(entries * ENTRY, ferrovia_transfer::target_options())
                .unwrap();
            let remotes: Vec<RemoteSegment> = vec![target.remote().unwrap()];
            let mut list = DescriptorList::with_capacity(entries);
            for i in 0..entries {
                list.push(i * ENTRY..(i + 1) * ENTRY, 0, (i * ENTRY) as u64);
            }
            let prepared = engine.prepare(&seg, &list, &remotes).unwrap();
            let lease = seg.lease_mut();
            group.throughput(Throughput::Elements(entries as u64));
            group.bench_with_input(
                BenchmarkId::new(format!("{rails}_rail"), entries),
                &entries,
                |b, _| {
                    engine
                        .scope(|s| {
                            b.iter(|| {
                                s.submit(&prepared, &lease, Op::Write, None)
                                    .and_then(|mut batch| batch.wait(Duration::from_secs(60)))
                                    .expect("batch")
                            });
                            Ok(())
                        })
                        .unwrap();
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, submit);
criterion_main!(benches);
