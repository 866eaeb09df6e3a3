//! Parameter-server style: rank 0 holds the parameters; every other rank
//! reads them with one-sided RDMA reads (rank 0's CPU is not involved),
//! then writes its update into its own slot of rank 0's update table.
//! `cargo run --example param_server` starts 4 ranks on this machine (over
//! UCX without RDMA hardware); on soft-RoCE: `cargo xtask vm -- cargo run
//! --example param_server`; under torchrun, srun or mpirun each process is
//! one rank.

use std::error::Error;
use std::time::Duration;

use ferrovia::{
    Gather, Node, PeerReadWorkRequest, PeerWriteWorkRequest, ReadWorkRequest, RegisterOptions,
    Scatter, WriteWorkRequest,
};

const PARAMS: usize = 1024; // f32 parameters
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
    // Rank 0's parameters (peers read them: the memory stays local, plain
    // bytes) and its update table (one f32 per rank; peers write it, so it
    // is shared memory, read by copying).
    let mut params = node
        .registry()
        .alloc(PARAMS * 4, RegisterOptions::local().allow_remote_read())?;
    let updates = node
        .registry()
        .alloc(n * 4, RegisterOptions::local().allow_remote_write())?;
    if me == 0 {
        for (i, p) in params.chunks_mut(4).enumerate() {
            p.copy_from_slice(&(i as f32 * 0.5).to_le_bytes());
        }
    }
    let param_regions = node.all_gather_remote(params.registration().remote()?, WAIT)?;
    let update_regions = node.all_gather_remote(updates.registration().remote()?, WAIT)?;
    let mut local = node
        .registry()
        .alloc(PARAMS * 4, RegisterOptions::local())?;
    let mut sum = 0f32;
    if me != 0 {
        node.scope(|s| -> Result<(), Box<dyn Error>> {
            s.post_read(PeerReadWorkRequest::new(
                0,
                ReadWorkRequest::new(Scatter::of(&mut local)?, param_regions[0])?,
            ))?
            .wait(WAIT)?;
            Ok(())
        })?;
        sum = local
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap_or_default()))
            .sum();
        let expected: f32 = (0..PARAMS).map(|i| i as f32 * 0.5).sum();
        assert_eq!(sum, expected, "rank {me} read the wrong parameters");
        let update = node
            .registry()
            .register_buffer((me as f32).to_le_bytes().to_vec(), RegisterOptions::local())?;
        node.scope(|s| -> Result<(), Box<dyn Error>> {
            let slot = update_regions[0].sub_region(4 * me as u64, 4)?;
            s.post_write(PeerWriteWorkRequest::new(
                0,
                WriteWorkRequest::new(&[Gather::of(&update)?], slot)?,
            ))?
            .wait(WAIT)?;
            Ok(())
        })?;
    }
    node.barrier(&everyone, WAIT)?; // every update has landed
    if me == 0 {
        let got: Vec<f32> = updates
            .to_vec()
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let expected: Vec<f32> = (0..n)
            .map(|r| if r == 0 { 0.0 } else { r as f32 })
            .collect();
        assert_eq!(got, expected, "update table");
        println!(
            "param_server: rank 0 served {PARAMS} parameters to {} readers and collected their updates {got:?}",
            n - 1
        );
    } else {
        println!(
            "param_server: rank {me} read {PARAMS} parameters (sum {sum}) and wrote its update"
        );
    }
    Ok(())
}
