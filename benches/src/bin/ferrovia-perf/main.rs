//! `ferrovia-perf`: perftest-style benchmarks through ferrovia's public
//! API, to compare with `ib_*_bw` / `ib_*_lat` on the same device, or with
//! `ucx_perftest` over UCX (`FERROVIA_BACKEND=ucx`).
//!
//! ```text
//! ferrovia-perf write_bw|read_bw|send_bw    [-s SIZE] [-n ITERS] [-t TX_DEPTH] [-q QPS] [-l POST_LIST] [-a] [-d DEV] [-p PORT] [SERVER]
//! ferrovia-perf write_lat|read_lat|send_lat [-s SIZE] [-n ITERS] [-a] [-d DEV] [-p PORT] [SERVER]
//! ferrovia-perf atomic_bw|atomic_lat        [-A FETCH_AND_ADD|CMP_AND_SWAP] [-n ITERS] [-t TX_DEPTH] [-d DEV] [-p PORT] [SERVER]
//! ferrovia-perf barrier                     [-n ITERS] [-p PORT] [SERVER]
//! ```
//!
//! `--async` runs the test through `ferrovia-async` (futures owning their
//! buffers, waking from the transport's event fd), `--async-busy` the same
//! busy-polling: set next to the scoped path's numbers.
//!
//! `-R` (write_bw and send_bw) speaks perftest's rdma_cm mode instead, so
//! the other side may be `ib_write_bw -R` or `ib_send_bw -R` (see
//! `rdma_cm`).
//!
//! As with perftest, the process started without a server address is the
//! server and the one given its address is the client; they meet through
//! ferrovia's own rendezvous (a two-rank `Node`, server = rank 0; with
//! `-q N`, N nodes on ports PORT..PORT+N, one thread each). MB is 2^20
//! bytes, as in perftest.

mod args;
mod asynchronous;
mod bandwidth;
mod batch;
mod flag;
mod latency;
mod passive;
mod rdma_cm;
mod report;

use std::process::ExitCode;
use std::time::Duration;

use ferrovia::{ChannelBuilder, Node, NodeError, VerbsConfig};

use crate::args::Args;

const WAIT: Duration = Duration::from_secs(60);

/// The `i`-th atomic of a run, into `result`: a fetch-and-add of 1, or a
/// compare-and-swap of `i` for `i + 1` (it succeeds while the client is
/// alone on the word, as in perftest's loop).
fn atomic_request<'env>(
    kind: args::AtomicKind,
    result: ferrovia::Scatter<'env>,
    word: ferrovia::RemoteMemoryRegion,
    i: u64,
) -> Result<ferrovia::AtomicWorkRequest<'env>, ferrovia::TransportError> {
    match kind {
        args::AtomicKind::FetchAndAdd => ferrovia::AtomicWorkRequest::fetch_add(result, word, 1),
        args::AtomicKind::CmpAndSwap => {
            ferrovia::AtomicWorkRequest::compare_swap(result, word, i, i + 1)
        }
    }
}

fn connect(args: &Args, qp: usize) -> Result<Node, NodeError> {
    let port = usize::from(args.port) + qp;
    let (rank, addr) = match &args.server {
        None => (0, format!("0.0.0.0:{port}")),
        Some(host) => (1, format!("{host}:{port}")),
    };
    let depth = args.tx_depth.max(args.post_list) as u32;
    let channel = ChannelBuilder::default()
        .send_depth(depth)
        .recv_depth(depth);
    let mut builder = Node::builder(rank, 2, addr).channel(channel);
    builder = builder.verbs(verbs_config(args));
    // perftest has no secret either: a fixed token unless the user set one.
    if std::env::var_os("FERROVIA_JOB_TOKEN").is_none() {
        builder = builder.token("ferrovia-perf");
    }
    builder.build()
}

/// The verbs settings of `-d`, `--post-path` and `--poll-path`.
fn verbs_config(args: &Args) -> VerbsConfig {
    use ferrovia::verbs::{PollPath, PostPath};
    let mut verbs = VerbsConfig::default();
    verbs.device = args.device.clone();
    verbs.post_path = match args.post_path {
        args::VerbsPath::Auto => PostPath::Auto,
        args::VerbsPath::Classic => PostPath::Classic,
        args::VerbsPath::Extended => PostPath::Extended,
    };
    verbs.poll_path = match args.poll_path {
        args::VerbsPath::Auto => PollPath::Auto,
        args::VerbsPath::Classic => PollPath::Classic,
        args::VerbsPath::Extended => PollPath::Extended,
    };
    verbs
}

/// One QP's run of every size: the client's measurements.
fn bandwidth_qp(args: &Args, qp: usize) -> Result<Vec<Option<bandwidth::Measured>>, String> {
    let mut node = connect(args, qp).map_err(|e| format!("connecting QP {qp}: {e}"))?;
    let role = if node.rank() == 0 { "server" } else { "client" };
    args.sizes
        .iter()
        .map(|&size| bandwidth::run(&mut node, size, args).map_err(|e| during(args, size, role, e)))
        .collect()
}

fn run_bandwidth(args: &Args) -> Result<(), String> {
    let results: Vec<Vec<Option<bandwidth::Measured>>> = if args.qps == 1 {
        vec![bandwidth_qp(args, 0)?]
    } else {
        std::thread::scope(|t| {
            let threads: Vec<_> = (0..args.qps)
                .map(|qp| t.spawn(move || bandwidth_qp(args, qp)))
                .collect();
            threads
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a QP thread panicked".to_string()))
                })
                .collect::<Result<Vec<_>, String>>()
        })?
    };
    if args.server.is_none() {
        return Ok(());
    }
    report::bw_header();
    for (i, &size) in args.sizes.iter().enumerate() {
        let per_qp: Vec<bandwidth::Measured> = results.iter().filter_map(|r| r[i]).collect();
        let bytes: f64 = per_qp.iter().map(|m| m.bytes).sum();
        // From the earliest start to the latest end: QPs that did not
        // overlap do not add up.
        let (Some(first), Some(last)) = (
            per_qp.iter().map(|m| m.start).min(),
            per_qp.iter().map(|m| m.end).max(),
        ) else {
            continue;
        };
        let secs = (last - first).as_secs_f64();
        let avg = bytes / secs / report::MB;
        let peak: f64 = per_qp.iter().map(|m| m.peak).sum::<f64>().max(avg);
        let iters = args.iters.div_ceil(args.post_list) * args.post_list * args.qps;
        report::bw_row(size, iters, peak, avg);
    }
    Ok(())
}

/// The test through `ferrovia-async`.
fn run_async(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let node = connect(args, 0)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let bench = asynchronous::Bench::new(node, args)?;
        let mode = if args.busy {
            "async, busy polling"
        } else {
            "async"
        };
        if args.is_bandwidth() {
            report::note(format_args!(
                "ferrovia-perf {} ({mode}) on {}",
                args.test,
                bench.describe()
            ));
            let mut rows = Vec::new();
            let role = if bench.rank() == 0 {
                "server"
            } else {
                "client"
            };
            for &size in &args.sizes {
                let m = bench
                    .bandwidth(size, args)
                    .await
                    .map_err(|e| during(args, size, role, e))?;
                rows.push((size, m));
            }
            if bench.rank() == 1 {
                report::bw_header();
                for (size, m) in rows.into_iter().filter_map(|(s, m)| m.map(|m| (s, m))) {
                    let avg = m.bytes / (m.end - m.start).as_secs_f64() / report::MB;
                    report::bw_row(size, args.iters, m.peak.max(avg), avg);
                }
            }
            return Ok(());
        }
        let role = if bench.rank() == 0 {
            "server"
        } else {
            "client"
        };
        report::note(format_args!(
            "ferrovia-perf {} ({role}, {mode}) on {}",
            args.test,
            bench.describe()
        ));
        report::lat_header();
        let sizes: &[usize] = if args.test == "barrier" {
            &[8]
        } else {
            &args.sizes
        };
        for &size in sizes {
            let times = bench
                .latency(size.max(1), args)
                .await
                .map_err(|e| during(args, size, role, e))?;
            report::lat_row(if args.test == "barrier" { 0 } else { size }, times);
        }
        Ok(())
    })
}

/// An error with what the run was doing: every wait has a deadline, and
/// one that expires says which test, size and side it stopped.
fn during(args: &Args, size: usize, role: &str, e: impl std::fmt::Display) -> String {
    format!("{} at {size} B ({role}): {e}", args.test)
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    if args.is_batch() {
        let mut node = connect(args, 0)?;
        return batch::run(&mut node, args);
    }
    if args.is_bandwidth() {
        report::note(format_args!("ferrovia-perf {} x{} QP", args.test, args.qps));
        return Ok(run_bandwidth(args)?);
    }
    let mut node = connect(args, 0)?;
    let role = if node.rank() == 0 { "server" } else { "client" };
    report::note(format_args!(
        "ferrovia-perf {} ({role}) on {}",
        args.test,
        node.describe()
    ));
    report::lat_header();
    let sizes: &[usize] = if args.test == "barrier" {
        &[0]
    } else {
        &args.sizes
    };
    for &size in sizes {
        let times =
            latency::run(&mut node, size.max(1), args).map_err(|e| during(args, size, role, e))?;
        report::lat_row(size, times);
    }
    Ok(())
}

/// The libraries' `tracing` events (with their spans) on stderr, filtered
/// per target by `RUST_LOG` (silent when it is unset).
fn init_logs() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::builder()
        .with_default_directive(tracing_subscriber::filter::LevelFilter::OFF.into())
        .from_env_lossy();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

fn main() -> ExitCode {
    init_logs();
    let args = match args::parse(std::env::args_os()) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    if args.json {
        report::json_for(&args.test);
    }
    if args.rdma_cm {
        return match rdma_cm::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ferrovia-perf: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.asynchronous {
        return match run_async(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ferrovia-perf: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrovia-perf: {e}");
            ExitCode::FAILURE
        }
    }
}
