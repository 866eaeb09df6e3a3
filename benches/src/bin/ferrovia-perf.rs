//! `ferrovia-perf`: perftest-style RDMA write benchmarks through ferrovia's
//! public API, to compare with `ib_write_bw` / `ib_write_lat` on the same
//! device.
//!
//! ```text
//! ferrovia-perf write_bw  [-s SIZE] [-n ITERS] [-t TX_DEPTH] [-a] [-p PORT] [SERVER]
//! ferrovia-perf write_lat [-s SIZE] [-n ITERS] [-a] [-p PORT] [SERVER]
//! ```
//!
//! As with perftest, the process started without a server address is the
//! server and the one given its address is the client; they meet through
//! ferrovia's own rendezvous (a two-rank `Node`, server = rank 0). The
//! device is `FERROVIA_DEVICE` or the first active one. MB is 2^20 bytes,
//! as in perftest.

use std::collections::VecDeque;
use std::process::ExitCode;
use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::time::{Duration, Instant};

use ferrovia::{
    Gather, Node, NodeError, PeerWriteWorkRequest, RegisterOptions, TransportError,
    WriteWorkRequest,
};

const WAIT: Duration = Duration::from_secs(60);
const MB: f64 = (1 << 20) as f64;
const LIST: usize = 16;

#[derive(Debug)]
struct Args {
    test: String,
    sizes: Vec<usize>,
    iters: usize,
    tx_depth: usize,
    port: u16,
    server: Option<String>,
}

fn usage() -> String {
    "usage: ferrovia-perf write_bw|write_lat [-s SIZE] [-n ITERS] [-t TX_DEPTH] [-a] [-p PORT] [SERVER]".into()
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let test = it.next().ok_or_else(usage)?;
    if !matches!(test.as_str(), "write_bw" | "write_lat") {
        return Err(format!("unknown test {test:?}\n{}", usage()));
    }
    let mut a = Args {
        iters: if test == "write_lat" { 1000 } else { 5000 },
        test,
        sizes: vec![65536],
        tx_depth: 128,
        port: 18515,
        server: None,
    };
    let num = |flag: &str, v: Option<String>| -> Result<usize, String> {
        v.ok_or(format!("{flag} needs a value"))?
            .parse()
            .map_err(|e| format!("{flag}: {e}"))
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "-s" | "--size" => a.sizes = vec![num(&flag, it.next())?],
            "-n" | "--iters" => a.iters = num(&flag, it.next())?,
            "-t" | "--tx-depth" => a.tx_depth = num(&flag, it.next())?,
            "-a" | "--all" => a.sizes = (1..=23).map(|p| 1usize << p).collect(),
            "-p" | "--port" => {
                a.port = u16::try_from(num(&flag, it.next())?).map_err(|e| e.to_string())?
            }
            other if !other.starts_with('-') && a.server.is_none() => {
                a.server = Some(other.to_owned())
            }
            other => return Err(format!("unknown flag {other:?}\n{}", usage())),
        }
    }
    if a.iters == 0 || a.tx_depth == 0 || a.sizes.contains(&0) {
        return Err("sizes, iterations and tx depth must be positive".into());
    }
    Ok(a)
}

fn connect(args: &Args) -> Result<Node, NodeError> {
    let (rank, addr) = match &args.server {
        None => (0, format!("0.0.0.0:{}", args.port)),
        Some(host) => (1, format!("{host}:{}", args.port)),
    };
    let channel = ferrovia::ChannelBuilder::default().send_depth(args.tx_depth.max(LIST) as u32);
    Node::builder(rank, 2, addr)
        .token("ferrovia-perf")
        .channel(channel)
        .build()
}

/// Bandwidth: the client keeps `tx_depth` writes in flight, posted as
/// lists of 16 with one doorbell and only the last of each signalled; the
/// server waits at a barrier. Returns (peak, average) MB/s on the client.
fn write_bw(node: &mut Node, size: usize, args: &Args) -> Result<Option<(f64, f64)>, NodeError> {
    let me = node.rank();
    let target = node
        .registry()
        .alloc(size, RegisterOptions::local().allow_remote_write())?;
    let src = node.registry().alloc(size, RegisterOptions::local())?;
    let remotes = node.all_gather_remote(target.registration().remote()?, WAIT)?;
    let both = [0, 1];
    if me == 0 {
        node.barrier(&both, WAIT * 10)?;
        return Ok(None);
    }
    let lists = args.iters.div_ceil(LIST);
    let in_flight = (args.tx_depth / LIST).max(1);
    let mut peak = 0f64;
    let start = Instant::now();
    node.scope(|s| {
        let g = [Gather::of(&src)?];
        let wrs = [WriteWorkRequest::new(&g, remotes[0])?; LIST];
        let mut pending = VecDeque::new();
        let mut last = Instant::now();
        for _ in 0..lists {
            if pending.len() >= in_flight {
                let h: ferrovia::ScopedPendingWork<'_, '_> =
                    pending.pop_front().expect("non-empty");
                h.spin_poll()?;
                let dt = last.elapsed().as_secs_f64();
                last = Instant::now();
                peak = peak.max((LIST * size) as f64 / dt / MB);
            }
            let mut hs = s.post_write_list(0, &wrs)?;
            pending.push_back(hs.pop().expect("a list of 16"));
        }
        for h in pending {
            h.spin_poll()?;
        }
        Ok::<_, TransportError>(())
    })?;
    let secs = start.elapsed().as_secs_f64();
    node.barrier(&both, WAIT)?;
    let avg = (lists * LIST * size) as f64 / secs / MB;
    Ok(Some((peak.max(avg), avg)))
}

/// Latency: RDMA-write ping-pong; each side spins on the last byte of its
/// receive buffer (atomic loads), like ib_write_lat. Returns one-way times
/// (half the round trip) in µs, measured on the client.
fn write_lat(node: &mut Node, size: usize, args: &Args) -> Result<Vec<f64>, NodeError> {
    let (me, peer) = (node.rank(), 1 - node.rank());
    let opts = RegisterOptions::local().allow_remote_write();
    let inbox = node.registry().alloc(size, opts)?;
    let mut src = node.registry().alloc(size, RegisterOptions::local())?;
    src.fill(0xff); // a flag flipping from 0 to 0xff says "arrived"
    let remotes = node.all_gather_remote(inbox.registration().remote()?, WAIT)?;
    let flag: &AtomicU8 = &inbox.as_atomic_bytes()[size - 1];
    // Polls the transport between looks at the flag: free on verbs, and
    // on UCX it drives progress on this thread (the peer's write lands).
    let spin = |s: &mut ferrovia::PollingScope<'_, '_, Node>| -> Result<(), TransportError> {
        let t = Instant::now();
        while flag.load(Acquire) != 0xff {
            s.progress()?;
            if t.elapsed() > WAIT {
                return Err(TransportError::Config(
                    "write_lat: the peer's write never arrived".into(),
                ));
            }
        }
        flag.store(0, Relaxed);
        Ok(())
    };
    let mut times = Vec::with_capacity(args.iters);
    node.scope(|s| {
        let g = [Gather::of(&src)?];
        let wr = PeerWriteWorkRequest::new(peer, WriteWorkRequest::new(&g, remotes[peer])?);
        for i in 0..args.iters {
            let t = Instant::now();
            if me == 1 {
                drop(s.post_write(wr)?);
                spin(s)?;
            } else {
                spin(s)?;
                drop(s.post_write(wr)?);
            }
            times.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
            // Reap send completions off the timed path, in batches.
            if i % 32 == 31 {
                s.progress()?;
            }
        }
        Ok::<_, TransportError>(())
    })?;
    node.barrier(&[0, 1], WAIT)?;
    Ok(times)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn run(args: &Args) -> Result<(), NodeError> {
    let mut node = connect(args)?;
    let role = if node.rank() == 0 { "server" } else { "client" };
    println!(
        "ferrovia-perf {} ({role}) on {}",
        args.test,
        node.describe()
    );
    if args.test == "write_bw" {
        println!(
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        );
        for &size in &args.sizes {
            if let Some((peak, avg)) = write_bw(&mut node, size, args)? {
                let mpps = avg * MB / size as f64 / 1e6;
                println!(
                    " {size:<10} {:<14} {peak:<18.2} {avg:<20.2} {mpps:.6}",
                    args.iters.div_ceil(LIST) * LIST
                );
            }
        }
    } else {
        println!(
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"
        );
        for &size in &args.sizes {
            let mut t = write_lat(&mut node, size, args)?;
            t.sort_by(f64::total_cmp);
            let avg = t.iter().sum::<f64>() / t.len() as f64;
            let sd = (t.iter().map(|x| (x - avg).powi(2)).sum::<f64>() / t.len() as f64).sqrt();
            println!(
                " {size:<6} {:<14} {:<14.2} {:<12.2} {:<16.2} {avg:<14.2} {sd:<15.2} {:<22.2} {:.2}",
                t.len(),
                t[0],
                t[t.len() - 1],
                percentile(&t, 0.5),
                percentile(&t, 0.99),
                percentile(&t, 0.999)
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ferrovia-perf: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrovia-perf: {e}");
            ExitCode::FAILURE
        }
    }
}
