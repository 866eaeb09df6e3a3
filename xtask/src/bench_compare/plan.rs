//! What `cargo xtask bench --compare` measures: the transports, the pairs
//! of tests (a `ferrovia-perf` test next to the reference tool's), the
//! message sizes, the iteration counts, and the command lines of both
//! tools.

use std::ffi::OsString;
use std::path::Path;

/// Where one half of the comparison runs, and against which tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// Verbs on an RDMA device (soft-RoCE `rxe0` in the VM), next to
    /// perftest (`ib_*_bw`, `ib_*_lat`).
    Verbs,
    /// UCX with `UCX_TLS=tcp` on the host, next to `ucx_perftest`.
    UcxTcp,
    /// UCX with `UCX_TLS=sm,self` on the host, next to `ucx_perftest`.
    UcxSm,
}

/// Every transport, in table order.
pub(crate) const TRANSPORTS: [Transport; 3] =
    [Transport::Verbs, Transport::UcxTcp, Transport::UcxSm];

impl Transport {
    /// The name in the results file.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Transport::Verbs => "verbs",
            Transport::UcxTcp => "ucx-tcp",
            Transport::UcxSm => "ucx-sm",
        }
    }

    /// Inverse of [`Transport::key`].
    pub(crate) fn from_key(key: &str) -> Option<Transport> {
        TRANSPORTS.into_iter().find(|t| t.key() == key)
    }

    /// `UCX_TLS` for the UCX transports.
    pub(crate) fn ucx_tls(self) -> Option<&'static str> {
        match self {
            Transport::Verbs => None,
            Transport::UcxTcp => Some("tcp"),
            Transport::UcxSm => Some("sm,self"),
        }
    }

    /// The test pairs measured on this transport.
    pub(crate) fn pairs(self) -> &'static [Pair] {
        match self {
            Transport::Verbs => &VERBS_PAIRS,
            Transport::UcxTcp | Transport::UcxSm => &UCX_PAIRS,
        }
    }
}

/// What a test measures, and so which number of its output counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Average bandwidth, MB/s (MB = 2^20 bytes): higher is better.
    Bandwidth,
    /// Typical (median) one-way latency, µs: lower is better.
    Latency,
}

impl Kind {
    /// The unit of the numbers in the tables.
    pub(crate) fn unit(self) -> &'static str {
        match self {
            Kind::Bandwidth => "MB/s",
            Kind::Latency => "µs",
        }
    }
}

pub(crate) use super::pairs::{Pair, UCX_PAIRS, VERBS_PAIRS};

/// Message sizes of every pair: 8 B, 4 KiB, 64 KiB, 1 MiB.
pub(crate) const SIZES: [usize; 4] = [8, 4 << 10, 64 << 10, 1 << 20];

/// The queue-pair scaling row: verbs `write_bw` at this size...
pub(crate) const QP_SIZE: usize = 64 << 10;
/// ...with these queue pair counts (`-q`)...
pub(crate) const QP_COUNTS: [usize; 4] = [1, 2, 4, 8];
/// ...and this many writes in all, spread over the queue pairs (both
/// tools count `-n` per queue pair).
const QP_TOTAL_ITERS: usize = 1000;

/// Repetitions of every measurement (each tool runs this often per cell;
/// issue 23 asks for medians of at least five, alternating).
pub(crate) const REPS: usize = 5;

/// The address the clients connect to: server and client share a machine.
pub(crate) const LOOPBACK: &str = "127.0.0.1";

/// One cell of a table: a pair at one size and queue pair count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Case {
    pub(crate) transport: Transport,
    pub(crate) pair: Pair,
    pub(crate) size: usize,
    /// Queue pairs (`-q`); 1 everywhere but the scaling row.
    pub(crate) qps: usize,
}

/// The cells of one repetition on `transport`, in the order they run:
/// every pair at every size, then (verbs only) the queue-pair scaling row.
pub(crate) fn cases(transport: Transport) -> Vec<Case> {
    let mut cases: Vec<Case> = transport
        .pairs()
        .iter()
        .flat_map(|&pair| {
            pair.sizes.iter().map(move |&size| Case {
                transport,
                pair,
                size,
                qps: 1,
            })
        })
        .collect();
    if transport == Transport::Verbs {
        cases.extend(QP_COUNTS.iter().filter(|&&q| q > 1).map(|&qps| Case {
            transport,
            pair: VERBS_PAIRS[0],
            size: QP_SIZE,
            qps,
        }));
    }
    cases
}

/// Iterations of a run (per queue pair), chosen so that one run takes
/// about a second or two: under TCG for verbs (soft-RoCE in the VM moves
/// 0.1-0.3 MB/s at 8 B and 30-90 MB/s from 64 KiB, with 10-50 µs at 8 B
/// and tens of ms at 1 MiB one-way), natively for UCX.
pub(crate) fn iterations(case: &Case) -> usize {
    if case.qps > 1 {
        return (QP_TOTAL_ITERS / case.qps).max(1);
    }
    let by_size: [usize; 4] = match (case.transport, case.pair.kind) {
        (Transport::Verbs, Kind::Bandwidth) => [10_000, 10_000, QP_TOTAL_ITERS, 100],
        (Transport::Verbs, Kind::Latency) => [2_000, 1_000, 300, 20],
        // ucx_perftest's gets over TCP take ~1.1 ms each at any size.
        (Transport::UcxTcp, Kind::Bandwidth) if case.pair.test == "read_bw" => {
            [1_000, 1_000, 1_000, 100]
        }
        // Long enough at 64 KiB and 1 MiB that shared memory (~30 GB/s)
        // runs for tens of milliseconds, not a few.
        (_, Kind::Bandwidth) => [100_000, 20_000, 20_000, 2_000],
        (_, Kind::Latency) => [10_000, 10_000, 2_000, 200],
    };
    let n = SIZES
        .iter()
        .position(|&s| s == case.size)
        .map_or(100, |i| by_size[i]);
    n.div_ceil(case.pair.list) * case.pair.list
}

/// Which program of a pair runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tool {
    /// `ferrovia-perf`.
    Ferrovia,
    /// perftest or `ucx_perftest`.
    Reference,
}

impl Tool {
    /// The name in the results file.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Tool::Ferrovia => "ferrovia",
            Tool::Reference => "reference",
        }
    }

    /// Inverse of [`Tool::key`].
    pub(crate) fn from_key(key: &str) -> Option<Tool> {
        [Tool::Ferrovia, Tool::Reference]
            .into_iter()
            .find(|t| t.key() == key)
    }

    /// The order of the two runs of a cell in repetition `rep` (from 1):
    /// alternated, so that a drift of the machine hits both tools alike.
    pub(crate) fn order(rep: usize) -> [Tool; 2] {
        if rep % 2 == 1 {
            [Tool::Ferrovia, Tool::Reference]
        } else {
            [Tool::Reference, Tool::Ferrovia]
        }
    }
}

/// How to run one measurement: a server, then a client of the same
/// program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invocation {
    pub(crate) program: OsString,
    pub(crate) server: Vec<OsString>,
    pub(crate) client: Vec<OsString>,
    /// Added to the environment of both.
    pub(crate) env: Vec<(String, String)>,
    /// The TCP ports the server listens on once it is ready for the client.
    pub(crate) listen: Vec<u16>,
    /// Pin the server to CPU 0 and the client to CPU 1 (host runs; see
    /// `doc.rs` for why).
    pub(crate) pin: bool,
}

/// TCP ports a run of `case` by `tool` needs from its first one on
/// (`ferrovia-perf -q N` meets its peer on N consecutive ports).
pub(crate) fn ports_needed(case: &Case, tool: Tool) -> usize {
    match tool {
        Tool::Ferrovia => case.qps,
        Tool::Reference => 1,
    }
}

/// The command lines of `tool` for `case`, on TCP port `port` (and the
/// ones after it, see [`ports_needed`]); `device` is the verbs device.
pub(crate) fn invocation(
    case: &Case,
    tool: Tool,
    perf: &Path,
    perftest: &Path,
    device: &str,
    port: u16,
) -> Invocation {
    let iters = iterations(case).to_string();
    let size = case.size.to_string();
    let port_arg = port.to_string();
    let mut env = Vec::new();
    let ferrovia = |flags: &[&str], env: &mut Vec<(String, String)>| {
        let mut args = vec![case.pair.test.to_string()];
        args.extend(["-s", &size, "-n", &iters, "-p", &port_arg].map(String::from));
        args.extend(flags.iter().map(|a| a.to_string()));
        if case.qps > 1 {
            args.extend(["-q".to_string(), case.qps.to_string()]);
        }
        match case.transport.ucx_tls() {
            None => {
                env.push(("FERROVIA_BACKEND".into(), "verbs".into()));
                env.push(("FERROVIA_DEVICE".into(), device.into()));
            }
            Some(tls) => {
                env.push(("FERROVIA_BACKEND".into(), "ucx".into()));
                env.push(("UCX_TLS".into(), tls.into()));
            }
        }
        (perf.as_os_str().to_owned(), args)
    };
    let (program, server): (OsString, Vec<String>) = match tool {
        Tool::Ferrovia => ferrovia(case.pair.ours, &mut env),
        Tool::Reference if case.pair.scoped_reference => ferrovia(case.pair.theirs, &mut env),
        Tool::Reference => match case.transport.ucx_tls() {
            None => {
                let mut args: Vec<String> = vec!["-d".into(), device.into()];
                if case.pair.sized {
                    args.extend(["-s".to_string(), size.clone()]);
                }
                args.extend(["-n", &iters, "-F"].map(String::from));
                args.extend(case.pair.theirs.iter().map(|a| a.to_string()));
                args.extend(["-p".to_string(), port_arg.clone()]);
                if case.qps > 1 {
                    args.extend(["-q".to_string(), case.qps.to_string()]);
                }
                (case.pair.reference.into(), args)
            }
            Some(tls) => {
                env.push(("UCX_TLS".into(), tls.into()));
                // ferrovia's endpoints use peer error handling where the
                // transport has it (tcp, not shared memory): so does the
                // reference (`-e`; it costs ~3 µs per 8 B tag round trip
                // over tcp here).
                let peer_errors = (case.transport == Transport::UcxTcp).then(|| "-e".to_string());
                let args = ["-t", case.pair.reference, "-s", &size, "-n", &iters, "-f"]
                    .map(String::from)
                    .into_iter()
                    .chain(case.pair.theirs.iter().map(|a| a.to_string()))
                    .chain(peer_errors)
                    .chain(["-p".to_string(), port_arg.clone()])
                    .collect();
                (perftest.as_os_str().to_owned(), args)
            }
        },
    };
    let mut client = server.clone();
    if tool == Tool::Reference && !case.pair.scoped_reference && case.transport.ucx_tls().is_some()
    {
        // ucx_perftest takes the server's address first.
        client.insert(0, LOOPBACK.into());
    } else {
        client.push(LOOPBACK.into());
    }
    let to_os = |args: Vec<String>| args.into_iter().map(OsString::from).collect();
    let listen = (0..ports_needed(case, tool))
        .filter_map(|i| u16::try_from(usize::from(port) + i).ok())
        .collect();
    Invocation {
        pin: case.transport.ucx_tls().is_some(),
        program,
        server: to_os(server),
        client: to_os(client),
        env,
        listen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(args: &[OsString]) -> Vec<&str> {
        args.iter().map(|a| a.to_str().unwrap()).collect()
    }

    #[test]
    fn every_transport_has_its_cells() {
        // Six pairs at four sizes, the list row, four atomics, the async
        // latencies at 8 B (two busy, one sleeping) and bandwidths at three sizes, the QP row.
        assert_eq!(cases(Transport::Verbs).len(), 6 * 4 + 1 + 4 + 3 + 2 * 3 + 3);
        assert_eq!(cases(Transport::UcxTcp).len(), 5 * 4 + 4 + 3 + 2 * 3);
        assert!(cases(Transport::UcxSm).iter().all(|c| c.qps == 1));
        for t in TRANSPORTS {
            assert_eq!(Transport::from_key(t.key()), Some(t));
            for case in cases(t) {
                assert!(iterations(&case) >= 1);
            }
        }
        assert_eq!(Tool::from_key("reference"), Some(Tool::Reference));
        assert_eq!(Tool::order(1), [Tool::Ferrovia, Tool::Reference]);
        assert_eq!(Tool::order(2), [Tool::Reference, Tool::Ferrovia]);
    }

    #[test]
    fn an_async_pair_runs_ferrovia_perf_on_both_paths() {
        let pair = UCX_PAIRS
            .into_iter()
            .find(|p| p.name == "send_lat:async-busy")
            .unwrap();
        let case = Case {
            transport: Transport::UcxSm,
            pair,
            size: 8,
            qps: 1,
        };
        let ours = invocation(
            &case,
            Tool::Ferrovia,
            Path::new("/p"),
            Path::new("ucx_perftest"),
            "rxe0",
            7,
        );
        let scoped = invocation(
            &case,
            Tool::Reference,
            Path::new("/p"),
            Path::new("ucx_perftest"),
            "rxe0",
            9,
        );
        assert_eq!(
            (ours.program.as_os_str(), scoped.program.as_os_str()),
            ("/p".as_ref(), "/p".as_ref())
        );
        assert_eq!(
            words(&ours.server),
            [
                "send_lat",
                "-s",
                "8",
                "-n",
                "10000",
                "-p",
                "7",
                "--async-busy"
            ]
        );
        assert_eq!(
            words(&scoped.server),
            ["send_lat", "-s", "8", "-n", "10000", "-p", "9"]
        );
        assert_eq!(words(&scoped.client).last(), Some(&LOOPBACK));
        assert!(scoped.env.contains(&("UCX_TLS".into(), "sm,self".into())));
    }

    #[test]
    fn names_are_unique_words_and_flags_reach_both_tools() {
        for t in TRANSPORTS {
            let names: Vec<&str> = t.pairs().iter().map(|p| p.name).collect();
            for (i, n) in names.iter().enumerate() {
                assert!(!n.contains(char::is_whitespace), "{n}");
                assert!(!names[..i].contains(n), "{n} twice");
            }
        }
        let cswap = Case {
            transport: Transport::Verbs,
            pair: VERBS_PAIRS[8],
            size: 8,
            qps: 1,
        };
        let inv = invocation(
            &cswap,
            Tool::Reference,
            Path::new("/p"),
            Path::new("ucx_perftest"),
            "rxe0",
            7,
        );
        assert_eq!(inv.program, "ib_atomic_lat");
        assert_eq!(
            words(&inv.server),
            [
                "-d",
                "rxe0",
                "-n",
                "2000",
                "-F",
                "-A",
                "CMP_AND_SWAP",
                "-p",
                "7"
            ]
        );
        let inv = invocation(
            &cswap,
            Tool::Ferrovia,
            Path::new("/p"),
            Path::new("ucx_perftest"),
            "rxe0",
            7,
        );
        assert_eq!(
            words(&inv.server),
            [
                "atomic_lat",
                "-s",
                "8",
                "-n",
                "2000",
                "-p",
                "7",
                "-A",
                "CMP_AND_SWAP"
            ]
        );
        let list = Case {
            pair: VERBS_PAIRS[6],
            ..cswap
        };
        let inv = invocation(
            &list,
            Tool::Reference,
            Path::new("/p"),
            Path::new("ucx_perftest"),
            "rxe0",
            7,
        );
        assert!(words(&inv.server).ends_with(&["-l", "64", "-p", "7"]));
        assert_eq!(iterations(&list) % 64, 0);
        let ucx = Case {
            transport: Transport::UcxSm,
            pair: UCX_PAIRS[5],
            size: 8,
            qps: 1,
        };
        let inv = invocation(
            &ucx,
            Tool::Reference,
            Path::new("/p"),
            Path::new("ucx_perftest"),
            "rxe0",
            7,
        );
        assert!(words(&inv.server).windows(2).any(|w| w == ["-O", "1"]));
    }

    #[test]
    fn queue_pair_runs_share_one_amount_of_work() {
        let total = |qps| {
            let case = Case {
                transport: Transport::Verbs,
                pair: VERBS_PAIRS[0],
                size: QP_SIZE,
                qps,
            };
            iterations(&case) * qps
        };
        assert!(QP_COUNTS.iter().all(|&q| total(q) == QP_TOTAL_ITERS));
    }

    #[test]
    fn perftest_command_lines() {
        let case = Case {
            transport: Transport::Verbs,
            pair: VERBS_PAIRS[2],
            size: 4096,
            qps: 1,
        };
        let inv = invocation(
            &case,
            Tool::Reference,
            Path::new("/p"),
            Path::new("ucx_perftest"),
            "rxe0",
            20001,
        );
        assert_eq!(inv.program, "ib_read_bw");
        assert_eq!(
            words(&inv.server),
            [
                "-d", "rxe0", "-s", "4096", "-n", "10000", "-F", "-p", "20001"
            ]
        );
        assert_eq!(words(&inv.client).last(), Some(&"127.0.0.1"));
        assert_eq!(inv.listen, [20001]);
        let scaled = Case {
            qps: 4,
            ..cases(Transport::Verbs)[0]
        };
        let inv = invocation(
            &scaled,
            Tool::Ferrovia,
            Path::new("/p"),
            Path::new("ucx_perftest"),
            "rxe0",
            20001,
        );
        assert_eq!(
            words(&inv.client),
            [
                "write_bw",
                "-s",
                "8",
                "-n",
                "250",
                "-p",
                "20001",
                "-q",
                "4",
                "127.0.0.1"
            ]
        );
        assert_eq!(inv.listen, [20001, 20002, 20003, 20004]);
        assert!(inv.env.contains(&("FERROVIA_DEVICE".into(), "rxe0".into())));
    }

    #[test]
    fn ucx_command_lines() {
        let case = Case {
            transport: Transport::UcxSm,
            pair: UCX_PAIRS[1],
            size: 8,
            qps: 1,
        };
        let inv = invocation(
            &case,
            Tool::Reference,
            Path::new("/p"),
            Path::new("ucx_perftest"),
            "rxe0",
            9,
        );
        assert_eq!(inv.program, "ucx_perftest");
        assert_eq!(
            words(&inv.client),
            [
                "127.0.0.1",
                "-t",
                "ucp_put_lat",
                "-s",
                "8",
                "-n",
                "10000",
                "-f",
                "-p",
                "9"
            ]
        );
        assert_eq!(inv.env, [("UCX_TLS".to_string(), "sm,self".to_string())]);
        let inv = invocation(
            &case,
            Tool::Ferrovia,
            Path::new("/p"),
            Path::new("ucx_perftest"),
            "rxe0",
            9,
        );
        assert_eq!(inv.program, "/p");
        assert_eq!(
            words(&inv.server),
            ["write_lat", "-s", "8", "-n", "10000", "-p", "9"]
        );
        assert!(inv.env.contains(&("FERROVIA_BACKEND".into(), "ucx".into())));
    }
}
