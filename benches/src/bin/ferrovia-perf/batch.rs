//! `batch_bw`: the transfer layer's batches. The client (rank 1) writes
//! `--entries` entries of `--size` bytes into the server's segment as one
//! batch over `--rails`, `--iters` times after one warm-up batch; the last
//! carries a notification the server waits for. Reported: bandwidth,
//! entries per second, and the time inside `submit` per entry (checking
//! and posting the first runs; the list was prepared once, outside).

use std::error::Error;
use std::time::{Duration, Instant};

use ferrovia::transfer::{Op, target_options};
use ferrovia::{DescriptorList, Node, RegisterOptions, TransferEngine};

use crate::args::Args;
use crate::report::MB;

type Res<T = ()> = Result<T, Box<dyn Error>>;

/// Entries wrap around a segment of at most this many bytes.
const SPAN_MAX: usize = 256 << 20;

pub(crate) fn run(node: &mut Node, args: &Args) -> Res {
    let wait = Duration::from_secs(120);
    let engine = TransferEngine::builder()
        .rails_named(&args.rails)
        .timeout(wait)
        .open(node)?;
    if node.rank() == 1 {
        crate::report::note(format_args!(
            "ferrovia-perf batch_bw: {} entries a batch over {} rail(s): {}",
            args.entries,
            engine.rails(),
            engine.rail_names().join("; ")
        ));
        header();
    }
    for &size in &args.sizes {
        let span = (args.entries.saturating_mul(size)).clamp(size, SPAN_MAX.max(size));
        let span = span - span % size;
        let target = engine.alloc(span, target_options())?;
        let remotes = engine.all_gather(node, &target.remote()?, wait)?;
        if node.rank() == 0 {
            let note = engine.wait_notification(wait)?;
            if note.data != size.to_le_bytes() {
                return Err(format!("a notification for size {:?}", note.data).into());
            }
        } else {
            let src = engine.alloc(span, RegisterOptions::local())?;
            let mut list = DescriptorList::with_capacity(args.entries);
            for i in 0..args.entries {
                let at = (i * size) % span;
                list.push(at..at + size, 0, at as u64);
            }
            let prepared = engine.prepare(&src, &list, &remotes)?;
            let lease = src.lease();
            let (mut submit, mut bytes) = (Duration::ZERO, 0u64);
            let mut elapsed = Duration::ZERO;
            engine.scope(|s| {
                s.submit(&prepared, &lease, Op::Write, None)?.wait(wait)?;
                let start = Instant::now();
                for i in 0..args.iters {
                    let last = i + 1 == args.iters;
                    let note = size.to_le_bytes();
                    let t = Instant::now();
                    let mut b =
                        s.submit(&prepared, &lease, Op::Write, last.then_some(&note[..]))?;
                    submit += t.elapsed();
                    bytes += b.wait(wait)?.bytes;
                }
                elapsed = start.elapsed();
                Ok(())
            })?;
            row(args, size, engine.rails(), bytes, elapsed, submit);
        }
        node.barrier(&[0, 1], wait)?;
    }
    Ok(())
}

fn header() {
    if crate::report::json() {
        return;
    }
    println!(
        " #entries   #bytes     #rails  #batches  BW average[MB/sec]  entries/sec     submit[ns/entry]"
    );
}

fn row(args: &Args, size: usize, rails: usize, bytes: u64, elapsed: Duration, submit: Duration) {
    let secs = elapsed.as_secs_f64();
    let entries = (args.entries * args.iters) as f64;
    let (bw, per_sec, submit_ns) = (
        bytes as f64 / secs / MB,
        entries / secs,
        submit.as_nanos() as f64 / entries,
    );
    if crate::report::batch_record(
        args.entries,
        size,
        rails,
        args.iters,
        bw,
        per_sec,
        submit_ns,
    ) {
        return;
    }
    println!(
        " {:<10} {size:<10} {rails:<7} {:<9} {:<19.2} {:<15.0} {:.1}",
        args.entries, args.iters, bw, per_sec, submit_ns
    );
}
