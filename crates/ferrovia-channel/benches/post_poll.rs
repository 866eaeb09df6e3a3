//! Software overhead of posting and polling, per request: the scoped core
//! driving a transport double that only counts and hands back one
//! completion per signalled request (`Counting`), so what is measured is
//! ferrovia's own work (slot table, element building, routing, handle
//! bookkeeping), not the NIC. Runs anywhere.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferrovia_channel::engine::run_scope;
use ferrovia_channel::{
    ChannelConfig, Gather, PeerSendWorkRequest, PeerWriteWorkRequest, SendWorkRequest,
    TransportError, Unpolled, WriteWorkRequest,
};
use ferrovia_mr::{RegisterOptions, RemoteMemoryRegion};

use ferrovia_testkit::Counting;

fn post_poll(c: &mut Criterion) {
    let target =
        ferrovia_testkit::target(&Counting::with_inline(1, 256, 64), ChannelConfig::default());
    let registry = ferrovia_testkit::registry();
    let buf = registry
        .register_buffer(vec![7u8; 4096], RegisterOptions::local())
        .unwrap();
    let remote = RemoteMemoryRegion::new(0x1000, 1 << 20, 2).unwrap();
    let mut g = c.benchmark_group("post_poll");
    g.throughput(Throughput::Elements(1));
    g.bench_function("send_64B_post+completion", |b| {
        run_scope(&target, Unpolled::Drain, |s| {
            let gather = [Gather::range(&buf, 0..64)?];
            b.iter(|| {
                let wr = PeerSendWorkRequest::new(0, SendWorkRequest::new(&gather).unwrap());
                black_box(s.post_send(wr).unwrap().spin_poll().unwrap().wr_id())
            });
            Ok::<_, TransportError>(())
        })
        .unwrap();
    });
    g.bench_function("write_4KiB_post+completion", |b| {
        run_scope(&target, Unpolled::Drain, |s| {
            let gather = [Gather::of(&buf)?];
            b.iter(|| {
                let wr =
                    PeerWriteWorkRequest::new(0, WriteWorkRequest::new(&gather, remote).unwrap());
                black_box(s.post_write(wr).unwrap().spin_poll().unwrap().wr_id())
            });
            Ok::<_, TransportError>(())
        })
        .unwrap();
    });
    for n in [16usize, 64] {
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(format!("write_list_{n}x64B_selective_signalling"), |b| {
            run_scope(&target, Unpolled::Drain, |s| {
                let gather = [Gather::range(&buf, 0..64)?];
                let wrs = vec![WriteWorkRequest::new(&gather, remote)?; n];
                b.iter(|| {
                    let h = s.post_write_list(0, &wrs).unwrap();
                    black_box(h.spin_poll().unwrap().wr_id())
                });
                Ok::<_, TransportError>(())
            })
            .unwrap();
        });
    }
    g.finish();

    let mut g = c.benchmark_group("hot_path");
    g.throughput(Throughput::Elements(1));
    g.bench_function("build_write_request_4KiB", |b| {
        b.iter(|| {
            let gather = [Gather::of(black_box(&buf)).unwrap()];
            black_box(WriteWorkRequest::new(&gather, black_box(remote)).unwrap());
        });
    });
    g.throughput(Throughput::Elements(32));
    g.bench_function("route_32_completions_out_of_order", |b| {
        run_scope(&target, Unpolled::Drain, |s| {
            let gather = [Gather::range(&buf, 0..64)?];
            b.iter(|| {
                let mut hs = Vec::with_capacity(32);
                for _ in 0..32 {
                    let wr = PeerSendWorkRequest::new(0, SendWorkRequest::new(&gather).unwrap());
                    hs.push(s.post_send(wr).unwrap());
                }
                // The newest first: every completion is routed to its slot
                // by wr_id before its handle asks.
                while let Some(h) = hs.pop() {
                    black_box(h.spin_poll().unwrap().wr_id());
                }
            });
            Ok::<_, TransportError>(())
        })
        .unwrap();
    });
    g.finish();
}

criterion_group!(benches, post_poll);
criterion_main!(benches);
