//! `ferrovia-perf`: perftest-style RDMA write benchmarks through ferrovia's
//! public API, to compare with `ib_write_bw` / `ib_write_lat` on the same
//! device.
//!
//! ```text
//! ferrovia-perf write_bw  [-s SIZE] [-n ITERS] [-t TX_DEPTH] [-a] [-d DEVICE]
//! ferrovia-perf write_lat [-s SIZE] [-n ITERS] [-a] [-d DEVICE]
//! ```
//!
//! This version runs both sides in one process over two queue pairs of the
//! same device (loopback), like running perftest's server and client on
//! one host. MB is 2^20 bytes, as in perftest.

use std::process::ExitCode;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::time::{Duration, Instant};

use ferrovia::{
    Channel, Gather, RegisterOptions, RemoteMemoryRegion, TransportError, WriteWorkRequest,
};

const WAIT: Duration = Duration::from_secs(30);
const MB: f64 = (1 << 20) as f64;

#[derive(Debug)]
struct Args {
    test: String,
    sizes: Vec<usize>,
    iters: usize,
    tx_depth: usize,
    device: Option<String>,
}

fn usage() -> String {
    "usage: ferrovia-perf write_bw|write_lat [-s SIZE] [-n ITERS] [-t TX_DEPTH] [-a] [-d DEVICE]"
        .into()
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
        device: None,
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
            "-d" | "--ib-dev" => a.device = Some(it.next().ok_or("-d needs a device name")?),
            other => return Err(format!("unknown flag {other:?}\n{}", usage())),
        }
    }
    if a.iters == 0 || a.tx_depth == 0 || a.sizes.contains(&0) {
        return Err("sizes, iterations and tx depth must be positive".into());
    }
    Ok(a)
}

fn connected_pair(args: &Args) -> Result<(Channel, Channel), TransportError> {
    let builder = || {
        let b = Channel::builder()
            .send_depth(args.tx_depth.max(16) as u32)
            .max_inline(64);
        match &args.device {
            Some(d) => b.device(d.clone()),
            None => b,
        }
    };
    let mut a = builder().build()?;
    let mut b = builder().pd(a.pd()).build()?;
    let (ea, eb) = (a.endpoint(), b.endpoint());
    a.connect(&eb)?;
    b.connect(&ea)?;
    Ok((a, b))
}

/// Bandwidth: keep `tx_depth` writes in flight, posted as lists of 16 with
/// one doorbell and only the last of each list signalled.
fn write_bw(
    a: &mut Channel,
    remote: RemoteMemoryRegion,
    size: usize,
    args: &Args,
) -> Result<(f64, f64), TransportError> {
    let src = a.registry().alloc(size, RegisterOptions::local())?;
    const LIST: usize = 16;
    let lists = args.iters.div_ceil(LIST);
    let in_flight_lists = (args.tx_depth / LIST).max(1);
    let mut peak = 0f64;
    let start = Instant::now();
    a.scope(|s| {
        let g = [Gather::of(&src)?];
        let wrs = [WriteWorkRequest::new(&g, remote)?; LIST];
        let mut pending = std::collections::VecDeque::new();
        let mut last = Instant::now();
        for _ in 0..lists {
            if pending.len() >= in_flight_lists {
                let h: ferrovia::ScopedPendingWork<'_> = pending.pop_front().expect("non-empty");
                h.spin_poll()?;
                let dt = last.elapsed().as_secs_f64();
                last = Instant::now();
                peak = peak.max((LIST * size) as f64 / dt / MB);
            }
            let mut hs = s.post_write_list(&wrs)?;
            pending.push_back(hs.pop().expect("a list of 16"));
        }
        for h in pending {
            h.spin_poll()?;
        }
        Ok::<_, TransportError>(())
    })
    .map_err(|e| TransportError::Config(e.to_string()))?;
    let secs = start.elapsed().as_secs_f64();
    let avg = (lists * LIST * size) as f64 / secs / MB;
    Ok((peak.max(avg), avg))
}

/// Latency: ping-pong of RDMA writes; each side spins on the last byte of
/// its receive buffer (atomic loads), like ib_write_lat. Returns one-way
/// times (half the round trip) in µs.
fn write_lat(
    a: &mut Channel,
    b: &mut Channel,
    size: usize,
    args: &Args,
) -> Result<Vec<f64>, TransportError> {
    let opts = RegisterOptions::local().allow_remote_write();
    let (a_src, a_dst) = (
        a.registry().alloc(size, opts)?,
        a.registry().alloc(size, opts)?,
    );
    let (b_src, b_dst) = (
        b.registry().alloc(size, opts)?,
        b.registry().alloc(size, opts)?,
    );
    let (a_flag, b_flag) = (
        &a_dst.as_atomic_bytes()[size - 1],
        &b_dst.as_atomic_bytes()[size - 1],
    );
    let (to_b, to_a) = (
        b_dst.registration().remote()?,
        a_dst.registration().remote()?,
    );
    let mut times = Vec::with_capacity(args.iters);
    // The sources end in 0xff: a flag that flips from 0 says "arrived".
    let fill = |m: &mut ferrovia::mr::RegisteredBuffer| m.fill(0xff);
    let (mut a_src, mut b_src) = (a_src, b_src);
    fill(&mut a_src);
    fill(&mut b_src);
    let spin = |flag: &std::sync::atomic::AtomicU8| -> Result<(), TransportError> {
        let t = Instant::now();
        while flag.load(Acquire) != 0xff {
            if t.elapsed() > WAIT {
                return Err(TransportError::Config(
                    "write_lat: the peer's write never arrived".into(),
                ));
            }
            std::hint::spin_loop();
        }
        flag.store(0, Relaxed);
        Ok(())
    };
    a.scope(|sa| {
        let ga = [Gather::of(&a_src)?];
        b.scope(|sb| {
            let gb = [Gather::of(&b_src)?];
            for i in 0..args.iters {
                let t = Instant::now();
                drop(sa.post_write(WriteWorkRequest::new(&ga, to_b)?)?);
                spin(b_flag)?;
                drop(sb.post_write(WriteWorkRequest::new(&gb, to_a)?)?);
                spin(a_flag)?;
                times.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
                // Reap send completions off the timed path, in batches.
                if i % 32 == 31 {
                    sa.progress()?;
                    sb.progress()?;
                }
            }
            Ok::<_, TransportError>(())
        })
        .map_err(|e| TransportError::Config(e.to_string()))
    })
    .map_err(|e| TransportError::Config(e.to_string()))?;
    Ok(times)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn run(args: &Args) -> Result<(), TransportError> {
    let (mut a, mut b) = connected_pair(args)?;
    println!(
        "ferrovia-perf {} on {}, loopback (two QPs, one device)",
        args.test,
        a.pd().context().name()
    );
    if args.test == "write_bw" {
        println!(
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        );
        for &size in &args.sizes {
            let target = b
                .registry()
                .alloc(size, RegisterOptions::local().allow_remote_write())?;
            let remote = target.registration().remote()?;
            let (peak, avg) = write_bw(&mut a, remote, size, args)?;
            let mpps = avg * MB / size as f64 / 1e6;
            println!(
                " {size:<10} {:<14} {peak:<18.2} {avg:<20.2} {mpps:.6}",
                args.iters.div_ceil(16) * 16
            );
        }
    } else {
        println!(
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"
        );
        for &size in &args.sizes {
            let mut t = write_lat(&mut a, &mut b, size, args)?;
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
