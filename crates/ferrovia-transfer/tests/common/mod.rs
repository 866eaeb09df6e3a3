//! A job of `n` ranks as threads of this process (each rank a `Node` of
//! its own, meeting at a rendezvous on loopback), for the transfer
//! layer's tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::thread;
use std::time::{Duration, Instant};

use ferrovia_node::{Backend, Node, NodeBuilder};

pub const T: Duration = Duration::from_secs(20);

/// The backend of this test binary's jobs: UCX unless it chose verbs
/// (the device tests) with [`on_verbs`].
static VERBS: AtomicBool = AtomicBool::new(false);

/// This binary's jobs run on verbs.
pub fn on_verbs() {
    VERBS.store(true, Relaxed);
}

/// Runs `f(rank, node)` on `n` ranks at once; their results, by rank.
pub fn job<R: Send + 'static>(
    n: usize,
    f: impl Fn(usize, Node) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    let backend = if VERBS.load(Relaxed) {
        Backend::Verbs
    } else {
        Backend::Ucx
    };
    static JOBS: AtomicUsize = AtomicUsize::new(0);
    let id = format!("{}-{}", std::process::id(), JOBS.fetch_add(1, Relaxed));
    let file = std::env::temp_dir().join(format!("ferrovia-transfer-test-{id}.port"));
    let _ = std::fs::remove_file(&file);
    let token = format!("transfer-test-{id}");
    let build = move |rank: usize, at: String| {
        let mut b = NodeBuilder::new(rank, n, at)
            .token(token.clone())
            .backend(backend)
            .bootstrap_timeout(T);
        if rank == 0 {
            b = b.report_port_to(file_for(&id));
        }
        b.build().expect("node")
    };
    let mut handles = Vec::with_capacity(n);
    let (f0, b0) = (f.clone(), build.clone());
    handles.push(thread::spawn(move || f0(0, b0(0, "127.0.0.1:0".into()))));
    let deadline = Instant::now() + T;
    let port: u16 = loop {
        if let Some(p) = std::fs::read_to_string(&file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break p;
        }
        assert!(Instant::now() < deadline, "rank 0 never reported its port");
        thread::sleep(Duration::from_millis(5));
    };
    let _ = std::fs::remove_file(&file);
    for rank in 1..n {
        let (f, b) = (f.clone(), build.clone());
        let at = format!("127.0.0.1:{port}");
        handles.push(thread::spawn(move || f(rank, b(rank, at))));
    }
    handles
        .into_iter()
        .map(|h| h.join().expect("a rank panicked"))
        .collect()
}

fn file_for(id: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ferrovia-transfer-test-{id}.port"))
}

/// The byte at `i` of block `b` of what rank `from` sends.
pub fn pattern(from: usize, b: usize, i: usize) -> u8 {
    (from * 131 + b * 31 + i * 7 + 1) as u8
}
