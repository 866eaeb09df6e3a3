//! Watching memory a peer writes: rank 0 RDMA-writes a word into rank 1's
//! shared memory while rank 1 spins on it with `load_u64`. Shared memory
//! is never a `&[u8]`, which a release build could read once and cache; an
//! atomic load sees the peer's write. `cargo run --release --example
//! watch_flag` starts both ranks on this machine (over UCX without RDMA
//! hardware); `cargo xtask vm -- cargo run --release --example watch_flag`
//! runs it on soft-RoCE.

use std::error::Error;
use std::time::{Duration, Instant};

use ferrovia::{
    Gather, Node, PeerWriteWorkRequest, RegisterOptions, SharedBuffer, WriteWorkRequest,
};

const WAIT: Duration = Duration::from_secs(30);
const MAGIC: u64 = 42;

/// Spins until the word holds `MAGIC`, at most `max` loads; returns how
/// many it took. A plain `&[u8]` read here may be hoisted out of the loop
/// by the optimizer; an atomic load may not.
#[inline(never)]
fn spin(flag: &SharedBuffer, max: u64) -> u64 {
    let mut loads = 0;
    while flag.load_u64(0).ok() != Some(MAGIC) && loads < max {
        loads += 1;
    }
    loads
}

fn main() -> Result<(), Box<dyn Error>> {
    // Spans and events on stderr as RUST_LOG filters them (unset: errors).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut node = Node::from_env_or_launch(2)?;
    let flag = node
        .registry()
        .alloc(8, RegisterOptions::local().allow_remote_write())?;
    let flags = node.all_gather_remote(flag.registration().remote()?, WAIT)?;
    if node.rank() == 1 {
        let started = Instant::now();
        let loads = spin(&flag, 20_000_000_000);
        let seen = flag.load_u64(0)?;
        if seen != MAGIC {
            return Err(format!("rank 1 never saw the peer's write ({loads} loads)").into());
        }
        println!(
            "watch_flag: rank 1 saw the peer's write after {loads} loads ({:?}) over {}",
            started.elapsed(),
            node.describe()
        );
    } else {
        // Let rank 1 start spinning before the write lands.
        std::thread::sleep(Duration::from_millis(300));
        let word = node
            .registry()
            .register_buffer(MAGIC.to_ne_bytes().to_vec(), RegisterOptions::local())?;
        node.scope(|s| -> Result<(), Box<dyn Error>> {
            let g = [Gather::of(&word)?];
            s.post_write(PeerWriteWorkRequest::new(
                1,
                WriteWorkRequest::new(&g, flags[1])?,
            ))?
            .wait(WAIT)?;
            Ok(())
        })?;
        println!("watch_flag: rank 0 wrote {MAGIC} into rank 1's flag");
    }
    node.barrier(&[0, 1], WAIT)?;
    Ok(())
}
