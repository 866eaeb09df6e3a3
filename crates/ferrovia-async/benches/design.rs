//! What the async layer's design costs per operation, over a loopback
//! transport that completes every operation at once (so only ferrovia's
//! own work is measured): `cargo bench -p ferrovia-async --bench design`.
//!
//! - `engine`: an owned send posted, routed and taken, on the bare
//!   engine (no lock);
//! - `engine under a mutex`: the same with the lock the async layer takes
//!   for each step (post, route, take);
//! - `future (current thread)`: `Async::send(..).await`, busy polling, on
//!   a current-thread runtime: the whole async path;
//! - `hand-off to an engine task`: the alternative design, an engine
//!   owned by one task that others reach through a channel and a oneshot,
//!   on a two-thread runtime.

use std::hint::black_box;
use std::task::Waker;
use std::time::{Duration, Instant};

use ferrovia_async::{Async, AsyncConfig};
use ferrovia_channel::engine::{ChannelCore, OwnedOp, OwnedPoll};

use ferrovia_channel::{ChannelConfig, MultiChannel, OwnedBuf, ScopeTarget};
use ferrovia_mr::RegisterOptions;
use ferrovia_testkit::Counting;

use parking_lot::Mutex;

const OPS: usize = 200_000;

fn channel() -> MultiChannel {
    // Completes every signalled op at once: only ferrovia's work is timed.
    MultiChannel::over(
        Counting::new(1, 256),
        ferrovia_testkit::registry(),
        ChannelConfig::default(),
    )
}

fn report(what: &str, took: Duration) {
    println!(
        "{what:<34} {:>8.1} ns/op",
        took.as_nanos() as f64 / OPS as f64
    );
}

/// One owned send through `core`: post, route, take; the buffer back.
fn round_trip(core: &ChannelCore, buf: OwnedBuf) -> OwnedBuf {
    let t = match core.try_post_owned(OwnedOp::send(0, buf, 0..8), None) {
        Ok(t) => t,
        Err(e) => panic!("refused: {e:?}"),
    };
    core.progress().expect("loopback poll");
    match core.poll_owned(t, Waker::noop()) {
        OwnedPoll::Ready(_, buf) => buf,
        other => panic!("not complete: {other:?}"),
    }
}

fn main() {
    let ch = channel();
    let mut buf = OwnedBuf::Plain(
        ch.registry()
            .register_buffer(vec![0u8; 8], RegisterOptions::local())
            .unwrap(),
    );
    let start = Instant::now();
    for _ in 0..OPS {
        buf = round_trip(ch.core(), buf);
    }
    report("engine", start.elapsed());

    let locked = Mutex::new(ch);
    let start = Instant::now();
    for _ in 0..OPS {
        // Post, route and take each under the lock, as the layer does.
        let t = locked
            .lock()
            .core()
            .try_post_owned(OwnedOp::send(0, buf, 0..8), None)
            .expect("posted");
        locked.lock().core().progress().expect("loopback poll");
        buf = match locked.lock().core().poll_owned(t, Waker::noop()) {
            OwnedPoll::Ready(_, b) => b,
            other => panic!("not complete: {other:?}"),
        };
    }
    report("engine under a mutex", start.elapsed());
    drop(black_box(buf));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let took = rt.block_on(async {
        let a = Async::with_config(channel(), AsyncConfig::default().busy_poll()).unwrap();
        let mut b = a
            .registry()
            .register_buffer(vec![0u8; 8], RegisterOptions::local())
            .unwrap();
        let start = Instant::now();
        for _ in 0..OPS {
            b = a.send(0, b).await.expect("loopback send").into_buf();
        }
        start.elapsed()
    });
    report("future (current thread)", took);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let took = rt.block_on(async {
        type Reply = tokio::sync::oneshot::Sender<OwnedBuf>;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<(OwnedBuf, Reply)>(64);
        let engine = tokio::spawn(async move {
            let ch = channel();
            while let Some((buf, reply)) = rx.recv().await {
                let _ = reply.send(round_trip(ch.core(), buf));
            }
        });
        let reg = ferrovia_testkit::registry();
        let mut buf = OwnedBuf::Plain(
            reg.register_buffer(vec![0u8; 8], RegisterOptions::local())
                .unwrap(),
        );
        let start = Instant::now();
        for _ in 0..OPS {
            let (rtx, rrx) = tokio::sync::oneshot::channel();
            tx.send((buf, rtx)).await.expect("engine task");
            buf = rrx.await.expect("engine reply");
        }
        let took = start.elapsed();
        drop(tx);
        engine.await.unwrap();
        took
    });
    report("hand-off to an engine task", took);
}
