//! A distributed counter: one 8-byte word on rank 0 that every rank
//! increments with remote fetch-and-add, and a ticket handed out by
//! compare-and-swap. `cargo run --example counter` starts 4 ranks on this
//! machine (over UCX without RDMA hardware); on soft-RoCE: `cargo xtask vm
//! -- cargo run --example counter`.
//!
//! Remote atomics are atomic with each other, not with the CPU's own
//! atomics on the same word (a NIC does its read-modify-write over PCIe).
//! So while peers may be adding, even rank 0 reads its own counter with a
//! remote atomic through its loopback connection (fetch-and-add of 0); it
//! reads the word directly (`load_u64`) only once a barrier says every
//! peer is done.

use std::error::Error;
use std::time::Duration;

use ferrovia::prelude::*;
use ferrovia::{Node, TransportError};

const ADDS: u64 = 1000;
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
    // Word 0: the counter; word 1: the ticket of the last rank through.
    let words = node
        .registry()
        .alloc(16, RegisterOptions::local().allow_remote_atomic())?;
    let all = node.all_gather_remote(words.registration().remote()?, WAIT)?;
    let counter = all[0].sub_region(0, 8)?;
    let ticket = all[0].sub_region(8, 8)?;
    let mut result = node.registry().alloc(8, RegisterOptions::local())?;

    let (mine, seen_mid) = node.scope(|s| {
        let mut mine = Vec::with_capacity(ADDS as usize);
        let mut buf = Scatter::of(&mut result)?;
        for _ in 0..ADDS {
            let wr = AtomicWorkRequest::fetch_add(buf, counter, 1)?;
            let done = s
                .post_atomic(PeerAtomicWorkRequest::new(0, wr))?
                .wait(WAIT)?;
            mine.push(done.original_value().unwrap_or_default());
            buf = done.into_scatter().expect("the result buffer comes back");
        }
        // A read that is correct while others still add: through the NIC.
        let wr = AtomicWorkRequest::fetch_add(buf, counter, 0)?;
        let seen = s
            .post_atomic(PeerAtomicWorkRequest::new(0, wr))?
            .wait(WAIT)?;
        Ok::<_, TransportError>((mine, seen.original_value().unwrap_or_default()))
    })?;
    // Each value this rank saw was handed to nobody else: they rise.
    assert!(mine.windows(2).all(|w| w[0] < w[1]), "rank {me}: {mine:?}");
    assert!(
        seen_mid >= ADDS,
        "rank {me} saw {seen_mid} after its own {ADDS} adds"
    );

    // Take a ticket: swap our rank + 1 in over whatever was there.
    let turn = node.scope(|s| {
        let mut last = 0;
        let mut buf = Scatter::of(&mut result)?;
        loop {
            let wr = AtomicWorkRequest::compare_swap(buf, ticket, last, me as u64 + 1)?;
            let done = s
                .post_atomic(PeerAtomicWorkRequest::new(0, wr))?
                .wait(WAIT)?;
            let was = done.original_value().unwrap_or_default();
            if was == last {
                return Ok::<_, TransportError>(was);
            }
            last = was;
            buf = done.into_scatter().expect("the result buffer comes back");
        }
    })?;

    node.barrier(&everyone, WAIT)?; // every atomic has landed
    if me == 0 {
        let total = words.load_u64(0)?;
        assert_eq!(total, n as u64 * ADDS, "the counter lost an update");
        let last = words.load_u64(8)?;
        assert!((1..=n as u64).contains(&last), "ticket {last}");
        println!(
            "counter: rank 0 holds {total} after {n} ranks added {ADDS} each; the last ticket went to rank {}",
            last - 1
        );
    } else {
        println!(
            "counter: rank {me} added {ADDS} (saw {} to {}), mid-way read {seen_mid}, took the ticket after {turn}",
            mine[0],
            mine[mine.len() - 1]
        );
    }
    Ok(())
}
