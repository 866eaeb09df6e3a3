//! A driver for instruction-count profiles of the hot path: `N` rounds of
//! one post and its completion (or of one list of `L` writes) through the
//! counting transport double, nothing else. As a test it runs a few
//! rounds and checks the double saw every request; to profile:
//!
//! ```text
//! cargo test --profile bench -p ferrovia-channel --test profile_loop --no-run
//! N=100000 valgrind --tool=callgrind target/release/deps/profile_loop-<hash>
//! callgrind_annotate callgrind.out.<pid>
//! ```
//!
//! `W=1` posts 4 KiB writes instead of 64-byte sends; `L=16` posts lists
//! of 16 64-byte writes with selective signalling. Divide the totals by
//! `N` (or `N * L`) for instructions per request; the setup is a few
//! hundred thousand.
//!
//! `R=50` (outside valgrind, `--nocapture`) times the `N` rounds `R` times
//! and prints the fastest, in ns per request: on a shared machine the
//! minimum shows ferrovia's own cost better than a mean does.

use std::hint::black_box;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use ferrovia_channel::engine::run_scope;
use ferrovia_channel::{
    ChannelConfig, Gather, PeerSendWorkRequest, PeerWriteWorkRequest, SendWorkRequest,
    TransportError, Unpolled, WriteWorkRequest,
};
use ferrovia_mr::{RegisterOptions, RemoteMemoryRegion};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| v.parse().expect("a number"))
}

#[test]
fn profile_loop() {
    let n = env("N", 100);
    let list = env("L", 0);
    let write = std::env::var_os("W").is_some();
    let counting = ferrovia_testkit::Counting::with_inline(1, 256, 64);
    let target = ferrovia_testkit::target(&counting, ChannelConfig::default());
    let registry = ferrovia_testkit::registry();
    let buf = registry
        .register_buffer(vec![7u8; 4096], RegisterOptions::local())
        .unwrap();
    let remote = RemoteMemoryRegion::new(0x1000, 1 << 20, 2).unwrap();
    let repeats = env("R", 1);
    let mut fastest = Duration::MAX;
    run_scope(&target, Unpolled::Drain, |s| {
        for _ in 0..repeats {
            let start = Instant::now();
            if list > 0 {
                let gather = [Gather::range(&buf, 0..64)?];
                let wrs = vec![WriteWorkRequest::new(&gather, remote)?; list];
                for _ in 0..n {
                    black_box(s.post_write_list(0, &wrs)?.spin_poll()?.wr_id());
                }
            } else if write {
                let gather = [Gather::of(&buf)?];
                for _ in 0..n {
                    let wr = PeerWriteWorkRequest::new(0, WriteWorkRequest::new(&gather, remote)?);
                    black_box(s.post_write(wr)?.spin_poll()?.wr_id());
                }
            } else {
                let gather = [Gather::range(&buf, 0..64)?];
                for _ in 0..n {
                    let wr = PeerSendWorkRequest::new(0, SendWorkRequest::new(&gather)?);
                    black_box(s.post_send(wr)?.spin_poll()?.wr_id());
                }
            }
            fastest = fastest.min(start.elapsed());
        }
        Ok::<_, TransportError>(())
    })
    .unwrap();
    let requests = n * list.max(1);
    assert_eq!(counting.posted.load(Relaxed), repeats * requests);
    if repeats > 1 {
        let ns = fastest.as_secs_f64() * 1e9 / requests as f64;
        println!("fastest of {repeats}: {ns:.1} ns per request");
    }
}
