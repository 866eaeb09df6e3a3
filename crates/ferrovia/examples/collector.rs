//! A collector: every rank sends reports to rank 0, which takes them in
//! any order through one shared pool of 8 receives instead of a ring per
//! peer: its receive memory stays 8 buffers however many ranks report.
//! `WorkDone::peer` says who sent each. `cargo run --example collector`
//! starts 4 ranks on this machine (over UCX without RDMA hardware); on
//! soft-RoCE: `cargo xtask vm -- cargo run --example collector`.

use std::collections::VecDeque;
use std::error::Error;
use std::time::Duration;

use ferrovia::prelude::*;
use ferrovia::{ChannelBuilder, NodeBuilder, NodeError};

const POOL: usize = 8;
const REPORTS: u32 = 20;
const REPORT: usize = 16;
const WAIT: Duration = Duration::from_secs(30);

fn main() -> Result<(), Box<dyn Error>> {
    // Spans and events on stderr as RUST_LOG filters them (unset: errors).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut node = NodeBuilder::from_env_or_launch(4)?
        .channel(ChannelBuilder::default().shared_receives(POOL as u32))
        .build()?;
    let (me, n) = (node.rank(), node.world_size());
    let everyone: Vec<usize> = (0..n).collect();
    if me == 0 {
        let mut pool = node
            .registry()
            .alloc(POOL * REPORT, RegisterOptions::local())?;
        let expected = REPORTS as usize * (n - 1);
        let per_rank = node.scope(|s| {
            let (bytes, reg) = pool.split_mut();
            let mut ring = VecDeque::new();
            for chunk in bytes.chunks_mut(REPORT).take(expected) {
                ring.push_back(
                    s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, chunk)?))?,
                );
            }
            s.barrier(&everyone, WAIT)?; // the pool is stocked: report
            let mut per_rank = vec![0u32; n];
            for taken in 0..expected {
                let done = ring.pop_front().expect("a receive per report").wait(WAIT)?;
                let from = done.peer().expect("a pooled receive names its sender");
                let buf = done.into_buffer().expect("the buffer comes back");
                let seq = u32::from_le_bytes(buf[..4].try_into().unwrap_or_default());
                assert_eq!(
                    seq, per_rank[from],
                    "reports from rank {from} arrive in order"
                );
                per_rank[from] += 1;
                // Post the buffer again while reports are still due.
                if taken + ring.len() + 1 < expected {
                    ring.push_back(
                        s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, buf)?))?,
                    );
                }
            }
            Ok::<_, NodeError>(per_rank)
        })?;
        println!(
            "collector: rank 0 took {expected} reports from {} ranks through {POOL} pooled receives: {:?}",
            n - 1,
            &per_rank[1..]
        );
    } else {
        let reports: Vec<u8> = (0..REPORTS)
            .flat_map(|seq| {
                let mut r = [me as u8; REPORT];
                r[..4].copy_from_slice(&seq.to_le_bytes());
                r
            })
            .collect();
        let reports = node
            .registry()
            .register_buffer(reports, RegisterOptions::local())?;
        node.scope(|s| {
            s.barrier(&everyone, WAIT)?;
            let gathers: Vec<[Gather<'_>; 1]> = (0..REPORTS as usize)
                .map(|i| Ok([Gather::range(&reports, i * REPORT..(i + 1) * REPORT)?]))
                .collect::<Result<_, NodeError>>()?;
            let sent: Vec<_> = gathers
                .iter()
                .map(|g| s.post_send(PeerSendWorkRequest::new(0, SendWorkRequest::new(g)?)))
                .collect::<Result<_, _>>()?;
            for h in sent {
                h.wait(WAIT)?;
            }
            Ok::<_, NodeError>(())
        })?;
        println!("collector: rank {me} sent {REPORTS} reports");
    }
    Ok(())
}
