//! KV-cache transfer from a prefill rank to a decode rank, as a
//! disaggregated inference server moves it: each rank keeps its KV blocks
//! in one pool, a zero-based segment of 1 GiB registered once on every
//! rail. For
//! one request, prefill (rank 0) writes the request's 1000 blocks of
//! 64 KiB from where they sit in its pool to the slots decode's block
//! table names in decode's pool, as one batch over every rail, with a
//! notification carrying the request id. Decode (rank 1) waits for the
//! notification and checks every block's checksum.
//!
//! `cargo run --example kv_transfer` starts both ranks on this machine
//! (over UCX without RDMA hardware). `FERROVIA_RAILS` picks the rails: a
//! count on the node's own backend (default 2) or device names
//! (`rxe0,rxe1`); `KV_BLOCKS` moves fewer blocks (a debug build in an
//! emulated VM spends a minute making and checking 1000).

use std::error::Error;
use std::time::Duration;

use ferrovia::transfer::{Op, target_options};
use ferrovia::{DescriptorList, Node, TransferEngine};

type Res<T = ()> = Result<T, Box<dyn Error>>;
const WAIT: Duration = Duration::from_secs(60);
/// One KV block (a layer's keys and values for a run of tokens).
const BLOCK: usize = 64 << 10;
/// Blocks a pool holds by default (1 GiB; `KV_POOL_MIB` sets another
/// size, e.g. in a small VM).
const POOL_BLOCKS: usize = 16384;
/// Blocks of the request moved by default, and at most.
const BLOCKS: usize = 1000;
const REQUEST: u64 = 7;

/// Where the request's block `i` sits in prefill's pool, and where
/// decode's block table wants it: scattered, as a block allocator leaves
/// them (both strides are coprime with the pool size, so slots differ).
fn prefill_slot(i: usize, pool: usize) -> usize {
    (i * 7 + 3) % pool
}
fn decode_slot(i: usize, pool: usize) -> usize {
    (i * 13 + 100) % pool
}

/// Blocks in a pool: `KV_POOL_MIB` (a power of two, at least 64 MiB, so
/// the strides above keep the request's slots apart) or 1 GiB.
fn pool_blocks() -> Res<usize> {
    let Ok(mib) = std::env::var("KV_POOL_MIB") else {
        return Ok(POOL_BLOCKS);
    };
    let mib: usize = mib.parse()?;
    if !mib.is_power_of_two() || mib < 64 {
        return Err(format!("KV_POOL_MIB={mib}: a power of two, at least 64").into());
    }
    Ok(mib * (1 << 20) / BLOCK)
}

/// Blocks of the request: `KV_BLOCKS` (1 to 1000) or 1000.
fn request_blocks() -> Res<usize> {
    let Ok(n) = std::env::var("KV_BLOCKS") else {
        return Ok(BLOCKS);
    };
    let n: usize = n.parse()?;
    if !(1..=BLOCKS).contains(&n) {
        return Err(format!("KV_BLOCKS={n}: 1 to {BLOCKS}").into());
    }
    Ok(n)
}

/// The request's block `i`, as prefill computed it.
fn block(i: usize) -> Vec<u8> {
    (0..BLOCK)
        .map(|j| ((i * 31 + j * 7) ^ (j >> 9) ^ REQUEST as usize) as u8)
        .collect()
}

/// FNV-1a over a block.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn main() -> Res {
    // Spans and events on stderr as RUST_LOG filters them (unset: errors).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut node = Node::from_env_or_launch(2)?;
    let (me, n) = (node.rank(), node.world_size());
    if n != 2 {
        return Err(format!("kv_transfer runs on 2 ranks, not {n}").into());
    }
    let engine = TransferEngine::builder()
        .same_rails(2)
        .rails_from_env()
        .open(&mut node)?;
    let blocks = pool_blocks()?;
    let count = request_blocks()?;
    let pool = engine.alloc(blocks * BLOCK, target_options().zero_based())?;
    let pools = engine.all_gather(&mut node, &pool.remote()?, WAIT)?;
    if me == 0 {
        // The prefill pass left the request's blocks in the pool.
        for i in 0..count {
            pool.buffer()
                .write_from(prefill_slot(i, blocks) * BLOCK, &block(i))?;
        }
        let mut list = DescriptorList::with_capacity(count);
        for i in 0..count {
            let from = prefill_slot(i, blocks) * BLOCK;
            list.push(
                from..from + BLOCK,
                1,
                (decode_slot(i, blocks) * BLOCK) as u64,
            );
        }
        // Checked and cut once; a server keeps it for the request's life.
        let prepared = engine.prepare(&pool, &list, &pools)?;
        let lease = pool.lease();
        let report = engine.scope(|s| {
            s.submit(&prepared, &lease, Op::Write, Some(&REQUEST.to_le_bytes()))?
                .wait(WAIT)
        })?;
        let mib = report.bytes as f64 / f64::from(1 << 20);
        let per_rail: Vec<String> = report.bytes_per_rail[..engine.rails()]
            .iter()
            .map(|b| format!("{:.1}", *b as f64 / f64::from(1 << 20)))
            .collect();
        println!(
            "kv_transfer: rank {me} of {n} (prefill) wrote request {REQUEST}: {} blocks, \
             {mib:.1} MiB in {:.1} ms ({:.0} MiB/s) over {} rails (MiB each: {})",
            report.entries,
            report.elapsed.as_secs_f64() * 1e3,
            mib / report.elapsed.as_secs_f64(),
            engine.rails(),
            per_rail.join(", ")
        );
    } else {
        let note = engine.wait_notification(WAIT)?;
        let request = u64::from_le_bytes(note.data[..].try_into()?);
        if (note.peer, request) != (0, REQUEST) {
            return Err(format!("a notification from {} for request {request}", note.peer).into());
        }
        // Every block landed before the notification: check them all.
        let mut got = vec![0u8; BLOCK];
        for i in 0..count {
            pool.buffer()
                .read_into(decode_slot(i, blocks) * BLOCK, &mut got)?;
            if checksum(&got) != checksum(&block(i)) {
                return Err(format!(
                    "block {i} (slot {}) is not what prefill wrote",
                    decode_slot(i, blocks)
                )
                .into());
            }
        }
        println!(
            "kv_transfer: rank {me} of {n} (decode) received request {request}: \
             {count} blocks of {} KiB, every checksum verified",
            BLOCK >> 10
        );
    }
    node.barrier(&[0, 1], WAIT)?;
    Ok(())
}
