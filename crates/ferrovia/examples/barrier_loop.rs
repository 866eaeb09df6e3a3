//! A barrier loop over every rank, then over the even and odd ranks
//! separately; prints the median barrier time. `cargo run --example
//! barrier_loop` starts 4 ranks on this machine (over UCX without RDMA
//! hardware); on soft-RoCE: `cargo xtask vm -- cargo run --example
//! barrier_loop`; under torchrun, srun or mpirun each process is one rank.

use std::error::Error;
use std::time::{Duration, Instant};

use ferrovia::Node;
use ferrovia::prelude::*;

const ROUNDS: usize = 100;
const WAIT: Duration = Duration::from_secs(30);

fn main() -> Result<(), Box<dyn Error>> {
    // Spans and events on stderr as RUST_LOG filters them (unset: errors).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut node = Node::from_env_or_launch(4)?;
    let (me, n) = (node.rank(), node.world_size());
    let everyone: Vec<usize> = (0..n).collect();
    let mine: Vec<usize> = (0..n).filter(|r| r % 2 == me % 2).collect();
    let mut times = Vec::with_capacity(ROUNDS);
    node.scope(|s| -> Result<(), Box<dyn Error>> {
        for _ in 0..ROUNDS {
            let t = Instant::now();
            s.barrier(&everyone, WAIT)?;
            times.push(t.elapsed());
            s.barrier(&mine, WAIT)?;
        }
        Ok(())
    })?;
    times.sort();
    println!(
        "barrier_loop: rank {me} of {n} passed {} barriers, median {:?}",
        2 * ROUNDS,
        times[ROUNDS / 2]
    );
    Ok(())
}
