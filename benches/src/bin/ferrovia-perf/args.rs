//! perftest-style command line, parsed by clap: `--help`, and errors that
//! name the bad argument.

use clap::{CommandFactory, Parser, ValueEnum};

/// The tests, in perftest's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Test {
    /// RDMA write bandwidth.
    #[value(name = "write_bw")]
    WriteBw,
    /// RDMA write latency (ping-pong of writes).
    #[value(name = "write_lat")]
    WriteLat,
    /// RDMA read bandwidth.
    #[value(name = "read_bw")]
    ReadBw,
    /// RDMA read latency.
    #[value(name = "read_lat")]
    ReadLat,
    /// Send/receive bandwidth.
    #[value(name = "send_bw")]
    SendBw,
    /// Send/receive latency (ping-pong).
    #[value(name = "send_lat")]
    SendLat,
    /// Remote atomic bandwidth (8-byte words; `-A` picks the operation).
    #[value(name = "atomic_bw")]
    AtomicBw,
    /// Remote atomic latency.
    #[value(name = "atomic_lat")]
    AtomicLat,
    /// Barrier latency of the two ranks.
    #[value(name = "barrier")]
    Barrier,
    /// Transfer-layer batches: `--entries` writes of `--size` bytes as one
    /// batch over `--rails`, `--iters` batches.
    #[value(name = "batch_bw")]
    BatchBw,
}

/// The atomic operation of the atomic tests, as perftest's `-A` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum AtomicKind {
    /// Fetch-and-add.
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
    /// Compare-and-swap.
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
}

/// How verbs posts and polls (`--post-path`, `--poll-path`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum VerbsPath {
    /// Extended where the provider offers it (the default).
    Auto,
    /// `ibv_post_send` / `ibv_poll_cq`.
    Classic,
    /// `ibv_wr_*` / `ibv_start_poll`; fails where not offered.
    Extended,
}

/// perftest-style benchmarks through ferrovia's public API. The process
/// started without a server address is the server, the one given its
/// address the client; they meet through ferrovia's own rendezvous.
#[derive(Debug, Parser)]
#[command(
    name = "ferrovia-perf",
    after_help = "MB is 2^20 bytes, as in perftest. Both sides present FERROVIA_JOB_TOKEN at the \
rendezvous when it is set, else the fixed token \"ferrovia-perf\": set it (the same on both) to \
keep others out of a server that listens on every interface."
)]
struct Cli {
    /// The test.
    test: Test,
    /// The server's host: given, this process is the client.
    server: Option<String>,
    /// Message size in bytes (default: 65536 for bandwidth, 8 for latency).
    #[arg(short = 's', long = "size")]
    size: Option<usize>,
    /// Every size from 2 B to 8 MiB.
    #[arg(short = 'a', long = "all", conflicts_with = "size")]
    all: bool,
    /// Iterations (default: 5000 for bandwidth, 1000 for latency).
    #[arg(short = 'n', long = "iters")]
    iters: Option<usize>,
    /// Work requests in flight.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    tx_depth: usize,
    /// Queue pairs (bandwidth tests): one node and thread each, on ports
    /// PORT..PORT+QPS.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qps: usize,
    /// Work requests per post list (one doorbell, the last signalled).
    #[arg(short = 'l', long = "post-list", default_value_t = 16)]
    post_list: usize,
    /// The atomic tests' operation.
    #[arg(
        short = 'A',
        long = "atomic_type",
        value_enum,
        default_value = "FETCH_AND_ADD"
    )]
    atomic: AtomicKind,
    /// batch_bw: entries per batch.
    #[arg(long = "entries", default_value_t = 10_000)]
    entries: usize,
    /// batch_bw: the rails, a count on the node's backend or device names
    /// (`rxe0,rxe1`), as `FERROVIA_RAILS`.
    #[arg(long = "rails", default_value = "1")]
    rails: String,
    /// RDMA device.
    #[arg(short = 'd', long = "ib-dev")]
    device: Option<String>,
    /// Rendezvous port.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    port: u16,
    /// Through ferrovia-async: futures owning their buffers, the reactor
    /// sleeping on the transport's event fd.
    #[arg(long = "async")]
    asynchronous: bool,
    /// Through ferrovia-async, busy polling.
    #[arg(long = "async-busy", conflicts_with = "asynchronous")]
    async_busy: bool,
    /// perftest's rdma_cm mode: connect through the RDMA connection
    /// manager and exchange perftest's messages, so the other side may be
    /// `ib_write_bw -R` or `ib_send_bw -R` (write_bw and send_bw, one size,
    /// one QP; the device is the one the address routes to, not -d).
    #[arg(short = 'R', long = "rdma_cm")]
    rdma_cm: bool,
    /// One JSON object per result on stdout, with the text table's
    /// columns (`{"test": "write_bw", "bytes": 65536, ...}`); the other
    /// lines go to stderr.
    #[arg(long = "json")]
    json: bool,
    /// Verbs: how work is posted (`ibv_wr_*` or `ibv_post_send`).
    #[arg(long = "post-path", value_enum, default_value = "auto")]
    post_path: VerbsPath,
    /// Verbs: how completions are polled (`ibv_start_poll` or
    /// `ibv_poll_cq`).
    #[arg(long = "poll-path", value_enum, default_value = "auto")]
    poll_path: VerbsPath,
}

#[derive(Debug, Clone)]
pub(crate) struct Args {
    pub(crate) test: String,
    pub(crate) sizes: Vec<usize>,
    pub(crate) iters: usize,
    pub(crate) tx_depth: usize,
    pub(crate) qps: usize,
    /// Work requests per post list (one doorbell, the last signalled).
    pub(crate) post_list: usize,
    pub(crate) device: Option<String>,
    pub(crate) port: u16,
    pub(crate) server: Option<String>,
    /// Through `ferrovia-async` (`--async`, `--async-busy`).
    pub(crate) asynchronous: bool,
    /// Async with busy polling (`--async-busy`).
    pub(crate) busy: bool,
    pub(crate) atomic: AtomicKind,
    /// perftest's rdma_cm mode (`-R`).
    pub(crate) rdma_cm: bool,
    /// batch_bw: entries per batch.
    pub(crate) entries: usize,
    /// batch_bw: the rails' words.
    pub(crate) rails: String,
    /// Results as JSON lines (`--json`).
    pub(crate) json: bool,
    /// Verbs post path (`--post-path`).
    pub(crate) post_path: VerbsPath,
    /// Verbs poll path (`--poll-path`).
    pub(crate) poll_path: VerbsPath,
}

impl Args {
    pub(crate) fn is_bandwidth(&self) -> bool {
        self.test.ends_with("_bw")
    }

    /// Whether this is the transfer layer's test.
    pub(crate) fn is_batch(&self) -> bool {
        self.test == "batch_bw"
    }
}

/// Parses `words` (the program name first).
pub(crate) fn parse<I, T>(words: I) -> Result<Args, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::try_parse_from(words)?;
    let test = cli
        .test
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_owned());
    let bandwidth = test.ends_with("_bw");
    let invalid =
        |msg: &str| Cli::command().error(clap::error::ErrorKind::ValueValidation, msg.to_owned());
    let atomic = test.starts_with("atomic");
    if atomic && (cli.all || cli.size.is_some_and(|s| s != 8)) {
        return Err(invalid(
            "the atomic tests work on 8-byte words: no --size or --all",
        ));
    }
    let sizes = match (cli.all, cli.size) {
        _ if atomic => vec![8],
        (true, _) => (1..=23).map(|p| 1usize << p).collect(),
        (false, Some(s)) => vec![s],
        (false, None) => vec![if bandwidth { 65536 } else { 8 }],
    };
    let batch = test == "batch_bw";
    let a = Args {
        iters: cli.iters.unwrap_or(if batch {
            10
        } else if bandwidth {
            5000
        } else {
            1000
        }),
        sizes,
        test,
        tx_depth: cli.tx_depth,
        qps: cli.qps,
        // An atomic is one request per post, as in perftest's atomic tests.
        post_list: if atomic { 1 } else { cli.post_list },
        device: cli.device,
        port: cli.port,
        server: cli.server,
        asynchronous: cli.asynchronous || cli.async_busy,
        busy: cli.async_busy,
        atomic: cli.atomic,
        rdma_cm: cli.rdma_cm,
        entries: cli.entries,
        rails: cli.rails,
        json: cli.json,
        post_path: cli.post_path,
        poll_path: cli.poll_path,
    };
    if a.iters == 0 || a.tx_depth == 0 || a.qps == 0 || a.post_list == 0 || a.sizes.contains(&0) {
        return Err(invalid(
            "--size, --iters, --tx-depth, --qp and --post-list must be positive",
        ));
    }
    if batch && (a.entries == 0 || a.asynchronous || a.qps > 1 || a.rdma_cm) {
        return Err(invalid(
            "batch_bw takes a positive --entries, and no --async, --qp or -R",
        ));
    }
    if a.asynchronous && a.test.starts_with("atomic") {
        return Err(invalid(
            "the atomic tests have no --async mode (the async path has fetch_add and compare_swap; the bench does not drive them yet)",
        ));
    }
    if a.qps > 1 && a.asynchronous {
        return Err(invalid(
            "--qp is a scoped-path option (one async engine per process)",
        ));
    }
    if a.qps > 1 && !bandwidth {
        return Err(invalid("--qp applies to the bandwidth tests"));
    }
    if usize::from(a.port) + a.qps > usize::from(u16::MAX) {
        return Err(invalid("--port + --qp exceeds 65535"));
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Args, clap::Error> {
        parse(std::iter::once("ferrovia-perf").chain(s.split_whitespace()))
    }

    #[test]
    fn perftest_flags_parse() {
        let a = p("read_bw -s 4096 -n 10 -t 64 -q 4 -l 4 -d rxe0 -p 9000 10.0.0.1").unwrap();
        assert_eq!(a.test, "read_bw");
        assert_eq!(a.post_list, 4);
        assert_eq!(a.sizes, [4096]);
        assert_eq!((a.iters, a.tx_depth, a.qps, a.port), (10, 64, 4, 9000));
        assert_eq!(a.device.as_deref(), Some("rxe0"));
        assert_eq!(a.server.as_deref(), Some("10.0.0.1"));
        assert_eq!(p("send_lat -a").unwrap().sizes.len(), 23);
        assert_eq!(p("barrier").unwrap().sizes, [8]);
        assert_eq!(p("write_bw").unwrap().iters, 5000);
        let a = p("atomic_bw -A CMP_AND_SWAP").unwrap();
        assert_eq!(
            (a.sizes.as_slice(), a.atomic),
            (&[8][..], AtomicKind::CmpAndSwap)
        );
        assert_eq!(p("atomic_lat").unwrap().atomic, AtomicKind::FetchAndAdd);
        let a = p("batch_bw -s 4096 --entries 1000 --rails rxe0,rxe1").unwrap();
        assert!(a.is_batch() && a.is_bandwidth());
        assert_eq!(
            (a.entries, a.rails.as_str(), a.iters),
            (1000, "rxe0,rxe1", 10)
        );
        assert!(p("batch_bw --entries 0").is_err());
        assert!(p("batch_bw --async").is_err());
    }

    #[test]
    fn async_modes_parse() {
        let a = p("write_lat --async-busy").unwrap();
        assert!(a.asynchronous && a.busy);
        let a = p("send_bw --async 10.0.0.1").unwrap();
        assert!(a.asynchronous && !a.busy);
        assert!(p("write_bw --async -q 2").is_err());
        assert!(p("write_bw --async --async-busy").is_err());
        assert!(p("atomic_lat --async").is_err());
    }

    #[test]
    fn bad_command_lines_are_refused_naming_the_argument() {
        for (bad, named) in [
            ("", "<TEST>"),
            ("atomic_bandwidth", "atomic_bandwidth"),
            ("atomic_lat -s 16", "8-byte"),
            ("atomic_bw -A XOR", "XOR"),
            ("write_bw -s", "--size"),
            ("write_bw -s 0", "--size"),
            ("write_bw -l 0", "--post-list"),
            ("write_bw -n x", "--iters"),
            ("write_lat -q 2", "--qp"),
            ("write_bw a b", "b"),
            ("write_bw -p 65535 -q 2", "65535"),
            ("write_bw -p 70000", "--port"),
        ] {
            let e = p(bad).expect_err(bad).to_string();
            assert!(e.contains(named), "{bad:?}: {e}");
        }
    }

    #[test]
    fn help_is_help() {
        let e = p("--help").unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
        assert!(e.to_string().contains("write_bw"));
    }
}
