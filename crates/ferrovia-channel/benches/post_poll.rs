//! Software overhead of posting and polling, per request: the scoped core
//! driving a transport double that completes every request at once, so
//! what is measured is ferrovia's own work (slot table, SGE building,
//! routing, handle bookkeeping), not the NIC. Runs anywhere.

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferrovia_channel::{
    ChannelConfig, ChannelCore, Completion, Gather, MultiPeer, OpKind, PeerSendWorkRequest,
    PeerWriteWorkRequest, RecvOp, ScopeTarget, SendOp, SendWorkRequest, Transport, TransportResult,
    WriteWorkRequest, run_scope,
};
use ferrovia_mr::{
    MrError, MrRegistry, RegisterOptions, RegisteredKeys, Registrar, RemoteMemoryRegion,
};
use ferrovia_verbs::AccessFlags;

/// Completes every op immediately; only signalled sends produce a
/// completion, as on a real send queue.
struct Instant {
    done: Mutex<VecDeque<Completion>>,
}

// SAFETY: touches no memory at all, and reports each signalled send and
// each receive once, in posting order, as soon as it is posted.
unsafe impl Transport for Instant {
    fn peers(&self) -> usize {
        1
    }
    fn send_depth(&self, _: usize) -> u32 {
        256
    }
    fn recv_depth(&self, _: usize) -> u32 {
        256
    }
    fn max_inline(&self, _: usize) -> u32 {
        64
    }
    unsafe fn post_send(&self, _: usize, ops: &[SendOp]) -> TransportResult<()> {
        let mut q = self.done.lock().unwrap();
        for op in ops.iter().filter(|o| o.signaled) {
            black_box(op.kind == OpKind::Write);
            q.push_back(Completion {
                wr_id: op.wr_id,
                ..Completion::default()
            });
        }
        Ok(())
    }
    unsafe fn post_recv(&self, _: usize, ops: &[RecvOp]) -> TransportResult<()> {
        let mut q = self.done.lock().unwrap();
        q.extend(ops.iter().map(|o| Completion {
            wr_id: o.wr_id,
            ..Completion::default()
        }));
        Ok(())
    }
    fn poll(&self, out: &mut [Completion]) -> TransportResult<usize> {
        let mut q = self.done.lock().unwrap();
        let n = out.len().min(q.len());
        for (o, c) in out.iter_mut().zip(q.drain(..n)) {
            *o = c;
        }
        Ok(n)
    }
    fn wait(&self, out: &mut [Completion], _: Duration) -> TransportResult<usize> {
        self.poll(out)
    }
    fn flush(&self, _: usize) -> TransportResult<()> {
        Ok(())
    }
}

struct Keys(AccessFlags);
// SAFETY: fixed keys reporting the asked-for access; no device or peer
// ever uses them.
unsafe impl RegisteredKeys for Keys {
    fn lkey(&self) -> u32 {
        1
    }
    fn rkey(&self) -> u32 {
        2
    }
    fn access(&self) -> AccessFlags {
        self.0
    }
}
struct NoDevice;
// SAFETY: never allocates; reports exactly the asked-for access.
unsafe impl Registrar for NoDevice {
    unsafe fn register(
        &self,
        _: *mut u8,
        _: usize,
        _: Option<u64>,
        access: AccessFlags,
    ) -> Result<Box<dyn RegisteredKeys>, MrError> {
        Ok(Box::new(Keys(access)))
    }
}

struct Loop(ChannelCore);
impl ScopeTarget for Loop {
    fn core(&self) -> &ChannelCore {
        &self.0
    }
}
impl MultiPeer for Loop {}

fn post_poll(c: &mut Criterion) {
    let transport = Arc::new(Instant {
        done: Mutex::new(VecDeque::with_capacity(1024)),
    });
    let target = Loop(ChannelCore::new(transport, ChannelConfig::default()));
    let registry = MrRegistry::with_registrar(NoDevice);
    let buf = registry
        .register_buffer(vec![7u8; 4096], RegisterOptions::local())
        .unwrap();
    let remote = RemoteMemoryRegion::new(0x1000, 1 << 20, 2).unwrap();
    let mut g = c.benchmark_group("post_poll");
    g.throughput(Throughput::Elements(1));
    g.bench_function("send_64B_post+spin_poll", |b| {
        run_scope(&target, false, |s| {
            let gather = [Gather::range(&buf, 0..64)?];
            b.iter(|| {
                let wr = PeerSendWorkRequest::new(0, SendWorkRequest::new(&gather).unwrap());
                black_box(s.post_send(wr).unwrap().spin_poll().unwrap().wr_id())
            });
            Ok::<_, ferrovia_channel::TransportError>(())
        })
        .unwrap();
    });
    g.bench_function("write_4KiB_post+spin_poll", |b| {
        run_scope(&target, false, |s| {
            let gather = [Gather::of(&buf)?];
            b.iter(|| {
                let wr =
                    PeerWriteWorkRequest::new(0, WriteWorkRequest::new(&gather, remote).unwrap());
                black_box(s.post_write(wr).unwrap().spin_poll().unwrap().wr_id())
            });
            Ok::<_, ferrovia_channel::TransportError>(())
        })
        .unwrap();
    });
    g.throughput(Throughput::Elements(16));
    g.bench_function("write_list_16x64B_one_doorbell", |b| {
        run_scope(&target, false, |s| {
            let gather = [Gather::range(&buf, 0..64)?];
            let wrs = [WriteWorkRequest::new(&gather, remote)?; 16];
            b.iter(|| {
                for h in s.post_write_list(0, &wrs).unwrap() {
                    black_box(h.spin_poll().unwrap().wr_id());
                }
            });
            Ok::<_, ferrovia_channel::TransportError>(())
        })
        .unwrap();
    });
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
        run_scope(&target, false, |s| {
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
            Ok::<_, ferrovia_channel::TransportError>(())
        })
        .unwrap();
    });
    g.finish();
}

criterion_group!(benches, post_poll);
criterion_main!(benches);
