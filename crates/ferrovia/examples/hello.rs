//! The README's example: rank 0 writes into rank 1's buffer with RDMA.
//! `cargo run --example hello` starts both ranks on this machine.

use std::time::Duration;

use ferrovia::prelude::*;
use ferrovia::{Gather, Node, NodeError, PeerWriteWorkRequest, RegisterOptions, WriteWorkRequest};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Spans and events on stderr as RUST_LOG filters them (unset: errors).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut node = Node::from_env_or_launch(2)?; // no launcher: start 2 ranks here
    let wait = Duration::from_secs(10);
    let inbox = node
        .registry()
        .alloc(64, RegisterOptions::local().allow_remote_write())?;
    let boards = node.all_gather_remote(inbox.registration().remote()?, wait)?;
    let msg = node
        .registry()
        .register_buffer(b"hello, rdma".to_vec(), RegisterOptions::local())?;
    node.scope(|s| {
        if s.rank() == 0 {
            // `msg` is borrowed by the write until it completes.
            let g = [Gather::of(&msg)?];
            s.post_write(PeerWriteWorkRequest::new(
                1,
                WriteWorkRequest::new(&g, boards[1])?,
            ))?
            .wait(wait)?;
        }
        s.barrier(&[0, 1], wait)?;
        Ok::<_, NodeError>(())
    })?;
    if node.rank() == 1 {
        println!(
            "hello: {} over {}",
            String::from_utf8_lossy(&inbox.to_vec()[..11]), // peers write it: copy out
            node.describe()
        );
    }
    Ok(())
}
