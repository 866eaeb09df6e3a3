//! The transfer layer's batches in `bench --compare`: `ferrovia-perf
//! batch_bw` (a server and a client on one machine, the client writing
//! ENTRIES x SIZE as one batch, `-n` batches after one warm-up) over UCX
//! tcp and shared memory on the host with one and two rails, and over
//! verbs on soft-RoCE with `rxe0` and `rxe0,rxe1` in the VM. Its client
//! prints one row, `#entries #bytes #rails #batches BW-average[MB/sec]
//! entries/sec submit[ns/entry]`; each run becomes one `batch ...` record
//! in the results file, beside the pairs' `run ...` records.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use super::pair::{self, Limits, Ports};
use super::plan::{self, Invocation, LOOPBACK, Transport};
use super::report::size_name;
use crate::failure::Result;
use crate::workspace::append_line;

/// One batch shape: `entries` writes of `size` bytes, `batches` timed
/// batches a run (after one warm-up batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) entries: usize,
    pub(crate) size: usize,
    pub(crate) batches: usize,
}

const fn shape(entries: usize, size: usize, batches: usize) -> Shape {
    Shape {
        entries,
        size,
        batches,
    }
}

/// On the host (UCX, native): about 1-3 s a run over tcp (600-1100 MB/s),
/// under 1 s over shared memory.
const HOST_SHAPES: [Shape; 4] = [
    shape(10_000, 4 << 10, 30),
    shape(10_000, 64 << 10, 2),
    shape(1_000, 64 << 10, 20),
    shape(1_000, 1 << 20, 2),
];

/// On soft-RoCE under TCG (~40-70 MB/s): 1,000 x 1 MiB would take 17 s a
/// batch, so 200 x 1 MiB; one timed batch of 10,000 x 64 KiB already
/// takes ~12 s (25 s with the warm-up).
const VERBS_SHAPES: [Shape; 4] = [
    shape(10_000, 4 << 10, 2),
    shape(10_000, 64 << 10, 1),
    shape(1_000, 64 << 10, 3),
    shape(200, 1 << 20, 1),
];

/// The shapes run on `transport` (also Mooncake's there).
pub(crate) fn shapes(transport: Transport) -> &'static [Shape] {
    match transport {
        Transport::Verbs => &VERBS_SHAPES,
        Transport::UcxTcp | Transport::UcxSm => &HOST_SHAPES,
    }
}

/// `ENTRIES x SIZE`, as the tables name a batch.
pub(crate) fn shape_name(entries: usize, size: usize) -> String {
    format!("{} x {}", thousands(entries), size_name(size))
}

/// `10,000`.
pub(crate) fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The rails of a run: `--rails` as given (a count on UCX, device names
/// on verbs).
pub(crate) fn rails(transport: Transport, device: &str) -> Vec<String> {
    match transport {
        Transport::UcxTcp | Transport::UcxSm => vec!["1".into(), "2".into()],
        Transport::Verbs => {
            let mut sets = vec![device.to_string()];
            // Every VM has a second soft-RoCE device (docs/soft-roce.md).
            if let Some(second) = std::env::var("SOFTROCE_DEV1")
                .ok()
                .filter(|d| !d.is_empty() && d != device)
            {
                sets.push(format!("{device},{second}"));
            }
            sets
        }
    }
}

/// How many rails `--rails WORD` asks for.
pub(crate) fn rail_count(word: &str) -> usize {
    word.parse()
        .unwrap_or_else(|_| word.split(',').filter(|w| !w.is_empty()).count())
}

/// Deadlines of one batch run: 10,000 x 64 KiB twice over soft-RoCE under
/// TCG takes 25 s, more on a loaded host.
pub(crate) const VM_LIMITS: Limits = Limits {
    listen: Duration::from_secs(30),
    client: Duration::from_secs(180),
    server_exit: Duration::from_secs(15),
};
pub(crate) const HOST_LIMITS: Limits = Limits {
    listen: Duration::from_secs(15),
    client: Duration::from_secs(60),
    server_exit: Duration::from_secs(10),
};

/// The first TCP port of the batch runs (the pairs' start at 21000).
const FIRST_PORT: u16 = 24000;

/// The numbers of a run's client row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Numbers {
    pub(crate) mb_per_s: f64,
    pub(crate) entries_per_s: f64,
    pub(crate) submit_ns: f64,
}

/// One run, as the results file keeps it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Record {
    pub(crate) transport: Transport,
    /// `--rails` as given (no whitespace).
    pub(crate) rails: String,
    pub(crate) entries: usize,
    pub(crate) size: usize,
    /// From 1.
    pub(crate) rep: usize,
    /// The numbers, or why there are none.
    pub(crate) outcome: std::result::Result<Numbers, String>,
}

/// The client's row for `shape` over `rails` rails: seven numbers, the
/// first four the entries, bytes, rails and batches asked for.
pub(crate) fn client_row(lines: &[String], shape: &Shape, rails: usize) -> Option<Numbers> {
    let want = [shape.entries, shape.size, rails, shape.batches].map(|v| v as f64);
    lines.iter().rev().find_map(|line| {
        let row: Vec<f64> = line
            .split_whitespace()
            .map(|w| w.parse::<f64>().ok().filter(|v| v.is_finite()))
            .collect::<Option<_>>()?;
        (row.len() == 7 && row[..4] == want).then(|| Numbers {
            mb_per_s: row[4],
            entries_per_s: row[5],
            submit_ns: row[6],
        })
    })
}

/// `batch TRANSPORT RAILS ENTRIES SIZE REP ok MB/S ENTRIES/S SUBMIT_NS`
/// or `batch TRANSPORT RAILS ENTRIES SIZE REP failed REASON...`.
pub(crate) fn to_line(r: &Record) -> String {
    let head = format!(
        "batch {} {} {} {} {}",
        r.transport.key(),
        r.rails,
        r.entries,
        r.size,
        r.rep
    );
    match &r.outcome {
        Ok(n) => format!(
            "{head} ok {} {} {}",
            n.mb_per_s, n.entries_per_s, n.submit_ns
        ),
        Err(reason) => {
            let words: Vec<&str> = reason.split_whitespace().collect();
            format!("{head} failed {}", words.join(" "))
        }
    }
}

/// Inverse of [`to_line`]; `None` for any other line.
pub(crate) fn parse_line(line: &str) -> Option<Record> {
    let mut words = line.split_whitespace();
    (words.next()? == "batch").then_some(())?;
    let transport = Transport::from_key(words.next()?)?;
    let rails = words.next()?.to_string();
    let entries = words.next()?.parse().ok()?;
    let size = words.next()?.parse().ok()?;
    let rep = words.next()?.parse().ok()?;
    let outcome = match words.next()? {
        "ok" => {
            let mut num = || words.next()?.parse::<f64>().ok().filter(|v| v.is_finite());
            let (mb_per_s, entries_per_s, submit_ns) = (num()?, num()?, num()?);
            Ok(Numbers {
                mb_per_s,
                entries_per_s,
                submit_ns,
            })
        }
        "failed" => Err(words.collect::<Vec<_>>().join(" ")),
        _ => return None,
    };
    Some(Record {
        transport,
        rails,
        entries,
        size,
        rep,
        outcome,
    })
}

/// The command lines of one run of `shape` over `rails` on `transport`.
pub(crate) fn invocation(
    transport: Transport,
    rails: &str,
    shape: &Shape,
    perf: &Path,
    device: &str,
    port: u16,
) -> Invocation {
    let server: Vec<String> = [
        "batch_bw",
        "-s",
        &shape.size.to_string(),
        "--entries",
        &shape.entries.to_string(),
        "-n",
        &shape.batches.to_string(),
        "--rails",
        rails,
        "-p",
        &port.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let mut client = server.clone();
    client.push(LOOPBACK.into());
    let env = match transport.ucx_tls() {
        None => vec![
            ("FERROVIA_BACKEND".into(), "verbs".into()),
            ("FERROVIA_DEVICE".into(), device.into()),
        ],
        Some(tls) => vec![
            ("FERROVIA_BACKEND".into(), "ucx".into()),
            ("UCX_TLS".into(), tls.into()),
        ],
    };
    let to_os = |v: Vec<String>| v.into_iter().map(OsString::from).collect();
    Invocation {
        pin: transport.ucx_tls().is_some(),
        program: perf.as_os_str().to_owned(),
        server: to_os(server),
        client: to_os(client),
        env,
        listen: vec![port],
    }
}

/// Every batch cell of `transports`, [`plan::REPS`] times, repetition by
/// repetition; no run starts after `deadline`. Appends one record per run
/// to `file`.
pub(crate) fn sweep(
    perf: &Path,
    device: &str,
    file: &Path,
    transports: &[Transport],
    deadline: Instant,
    limits: Limits,
) -> Result<()> {
    let mut ports = Ports::new(FIRST_PORT);
    for rep in 1..=plan::REPS {
        for &transport in transports {
            for rails in rails(transport, device) {
                for shape in shapes(transport) {
                    if Instant::now() >= deadline {
                        say!(
                            "xtask bench: batch time budget used up: no more batch runs after \
                             repetition {rep} began"
                        );
                        return Ok(());
                    }
                    let port = ports.take(1)?;
                    let inv = invocation(transport, &rails, shape, perf, device, port);
                    let outcome = match pair::run(&inv, limits)? {
                        Ok(ran) => client_row(&ran.client_stdout, shape, rail_count(&rails))
                            .ok_or_else(|| {
                                let last = ran
                                    .client_stdout
                                    .iter()
                                    .rev()
                                    .find(|l| !l.trim().is_empty());
                                format!(
                                    "no batch_bw row in the client's output{}",
                                    last.map(|l| format!(" (last line: {})", l.trim()))
                                        .unwrap_or_default()
                                )
                            }),
                        Err(reason) => Err(reason),
                    };
                    let what = format!(
                        "run {rep} batch_bw {} --rails {rails} {}",
                        super::report::transport_title(transport, device),
                        shape_name(shape.entries, shape.size)
                    );
                    match &outcome {
                        Ok(n) => say!(
                            "xtask bench: {what}: {:.1} MB/s, {:.0} entries/s, submit {:.1} ns/entry",
                            n.mb_per_s,
                            n.entries_per_s,
                            n.submit_ns
                        ),
                        Err(reason) => say!("xtask bench: {what}: nothing: {reason}"),
                    }
                    let record = Record {
                        transport,
                        rails: rails.clone(),
                        entries: shape.entries,
                        size: shape.size,
                        rep,
                        outcome,
                    };
                    append_line(file, &to_line(&record))?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(String::from).collect()
    }

    /// The client's output over two UCX tcp rails.
    const CLIENT: &str = "\
ferrovia-perf batch_bw: 10000 entries a batch over 2 rail(s): ucx tcp; ucx tcp
 #entries   #bytes     #rails  #batches  BW average[MB/sec]  entries/sec     submit[ns/entry]
 10000      4096       2       30        707.04              181002          108.3
";

    #[test]
    fn the_client_row_is_read_for_its_shape_only() {
        let shape = shape(10_000, 4096, 30);
        assert_eq!(
            client_row(&lines(CLIENT), &shape, 2),
            Some(Numbers {
                mb_per_s: 707.04,
                entries_per_s: 181002.0,
                submit_ns: 108.3
            })
        );
        assert_eq!(client_row(&lines(CLIENT), &shape, 1), None);
        let other = Shape {
            batches: 3,
            ..shape
        };
        assert_eq!(client_row(&lines(CLIENT), &other, 2), None);
        for bad in [
            "",
            " 10000 4096 2 30 707.04 181002",
            " 10000 4096 2 30 707.04 181002 x",
            " 10000 4096 2 30 707.04 181002 NaN",
        ] {
            assert_eq!(client_row(&lines(bad), &shape, 2), None, "{bad:?}");
        }
    }

    #[test]
    fn records_round_trip() {
        let ok = Record {
            transport: Transport::Verbs,
            rails: "rxe0,rxe1".into(),
            entries: 200,
            size: 1 << 20,
            rep: 2,
            outcome: Ok(Numbers {
                mb_per_s: 58.25,
                entries_per_s: 58.25,
                submit_ns: 987012.4,
            }),
        };
        let failed = Record {
            transport: Transport::UcxSm,
            rails: "2".into(),
            outcome: Err("the ferrovia-perf client timed out\n after 60 s".into()),
            ..ok.clone()
        };
        assert_eq!(parse_line(&to_line(&ok)), Some(ok.clone()));
        assert_eq!(
            to_line(&failed),
            "batch ucx-sm 2 200 1048576 2 failed the ferrovia-perf client timed out after 60 s"
        );
        assert_eq!(
            parse_line(&to_line(&failed)).unwrap().outcome,
            Err("the ferrovia-perf client timed out after 60 s".to_string())
        );
        for bad in [
            "",
            "run verbs write_bw 8 1 ferrovia 1 ok 1 1",
            "batch nowhere 1 10 8 1 ok 1 2 3",
            "batch verbs rxe0 10 8 1 ok 1 2",
            "batch verbs rxe0 10 8 1 ok 1 2 inf",
            "batch verbs rxe0 ten 8 1 ok 1 2 3",
            "batch verbs rxe0 10 8 1 maybe",
        ] {
            assert_eq!(parse_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn command_lines_and_rails() {
        let s = shapes(Transport::UcxTcp)[0];
        let inv = invocation(Transport::UcxTcp, "2", &s, Path::new("/p"), "rxe0", 7);
        let words = |a: &[OsString]| -> Vec<String> {
            a.iter().map(|w| w.to_string_lossy().into_owned()).collect()
        };
        assert_eq!(
            words(&inv.client),
            [
                "batch_bw",
                "-s",
                "4096",
                "--entries",
                "10000",
                "-n",
                "30",
                "--rails",
                "2",
                "-p",
                "7",
                "127.0.0.1"
            ]
        );
        assert_eq!(inv.server.len() + 1, inv.client.len());
        assert_eq!(inv.listen, [7]);
        assert!(inv.env.contains(&("UCX_TLS".into(), "tcp".into())));
        let v = shapes(Transport::Verbs)[3];
        assert_eq!((v.entries, v.size), (200, 1 << 20));
        let inv = invocation(
            Transport::Verbs,
            "rxe0,rxe1",
            &v,
            Path::new("/p"),
            "rxe0",
            7,
        );
        assert!(inv.env.contains(&("FERROVIA_DEVICE".into(), "rxe0".into())));
        assert_eq!(rails(Transport::UcxSm, "rxe0"), ["1", "2"]);
        assert_eq!(rails(Transport::Verbs, "rxe0")[0], "rxe0");
        assert_eq!((rail_count("2"), rail_count("rxe0,rxe1")), (2, 2));
        assert_eq!(rail_count("rxe0"), 1);
        assert_eq!(shape_name(10_000, 4096), "10,000 x 4 KiB");
        assert_eq!(
            (thousands(200), thousands(1_000_000)),
            ("200".into(), "1,000,000".into())
        );
    }
}
