//! The tables of `cargo xtask bench --compare`: the median of every cell
//! for each tool, their ratio, the queue-pair scaling row, and the runs
//! that gave no number, as markdown.

use std::fmt::Write as _;

use super::parse::{Outcome, Record};
use super::plan::{self, Case, Kind, Pair, Tool, Transport};

/// How a transport is named in the tables (`device`: the verbs device).
pub(crate) fn transport_title(transport: Transport, device: &str) -> String {
    match transport {
        Transport::Verbs => device.to_string(),
        Transport::UcxTcp => "UCX tcp".into(),
        Transport::UcxSm => "UCX sm,self".into(),
    }
}

/// The reference tool's name in a table header.
fn reference_name(transport: Transport, pair: &Pair) -> String {
    match transport {
        _ if pair.scoped_reference => pair.reference.to_string(),
        Transport::Verbs => pair.reference.to_string(),
        Transport::UcxTcp | Transport::UcxSm => format!("ucx_perftest -t {}", pair.reference),
    }
}

/// `8 B`, `4 KiB`, `1 MiB`.
pub(crate) fn size_name(size: usize) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

/// A number with about three significant digits.
pub(crate) fn number(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 => format!("{v:.0}"),
        a if a >= 10.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

/// The median of `values` (the mean of the middle two for an even count).
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// What one tool gave in one cell.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Runs {
    /// The numbers of the runs that gave one, in the order they ran.
    pub(super) values: Vec<f64>,
    /// Runs started, numbers or not.
    pub(super) attempted: usize,
}

/// The median of `tool`'s runs in `case` and how many gave a number.
pub(crate) fn tool_runs(records: &[Record], case: &Case, tool: Tool) -> (Option<f64>, usize) {
    let r = runs(records, case, tool);
    (median(&r.values), r.values.len())
}

/// The runs of `tool` in `case`.
pub(super) fn runs(records: &[Record], case: &Case, tool: Tool) -> Runs {
    let mut runs = Runs::default();
    for r in records.iter().filter(|r| {
        r.transport == case.transport
            && r.test == case.pair.name
            && r.size == case.size
            && r.qps == case.qps
            && r.tool == tool
    }) {
        runs.attempted += 1;
        if let Outcome::Measured { value, .. } = r.outcome {
            runs.values.push(value);
        }
    }
    runs
}

/// One row: both medians and their ratio, `—` where a side has none.
fn cells(records: &[Record], case: &Case) -> [String; 4] {
    let ours = runs(records, case, Tool::Ferrovia);
    let theirs = runs(records, case, Tool::Reference);
    let (a, b) = (median(&ours.values), median(&theirs.values));
    let show = |m: Option<f64>| m.map_or_else(|| "—".to_string(), number);
    let ratio = match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "—".into(),
    };
    let count = format!("{}+{}", ours.values.len(), theirs.values.len());
    [show(a), show(b), ratio, count]
}

/// The main table: every transport that has records, every pair, every
/// size.
fn main_table(records: &[Record], device: &str, out: &mut String) {
    out.push_str(
        "| transport | test | reference | size | unit | ferrovia | reference | ferrovia/reference | runs |\n\
         |---|---|---|---:|---|---:|---:|---:|---:|\n",
    );
    for transport in plan::TRANSPORTS {
        if !records.iter().any(|r| r.transport == transport) {
            continue;
        }
        for case in plan::cases(transport).iter().filter(|c| c.qps == 1) {
            let [a, b, ratio, count] = cells(records, case);
            let unit = match case.pair.kind {
                Kind::Bandwidth => "MB/s",
                Kind::Latency => "µs typ.",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {unit} | {a} | {b} | {ratio} | {count} |",
                transport_title(transport, device),
                case.pair.name,
                reference_name(transport, &case.pair),
                size_name(case.size),
            );
        }
    }
}

/// The queue-pair scaling table (verbs `write_bw` at 64 KiB).
fn qp_table(records: &[Record], out: &mut String) {
    let pair = plan::VERBS_PAIRS[0];
    let _ = writeln!(
        out,
        "| QPs | ferrovia write_bw (MB/s) | {} (MB/s) | ferrovia/reference | runs |\n\
         |---:|---:|---:|---:|---:|",
        pair.reference
    );
    for qps in plan::QP_COUNTS {
        let case = Case {
            transport: Transport::Verbs,
            pair,
            size: plan::QP_SIZE,
            qps,
        };
        let [a, b, ratio, count] = cells(records, &case);
        let _ = writeln!(out, "| {qps} | {a} | {b} | {ratio} | {count} |");
    }
}

/// At most this many runs are named on one line of [`failures`].
const NAMED_RUNS: usize = 8;

/// The runs that gave no number: one line per transport, tool and reason,
/// naming the runs.
fn failures(records: &[Record], device: &str) -> Vec<String> {
    // "TRANSPORT, TOOL: REASON" and its runs, in order of appearance.
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for r in records {
        let Outcome::Failed(reason) = &r.outcome else {
            continue;
        };
        let tool = match r.tool {
            Tool::Ferrovia => "ferrovia-perf",
            Tool::Reference => "reference",
        };
        let key = format!("{}, {tool}: {reason}", transport_title(r.transport, device));
        let qps = if r.qps > 1 {
            format!(" -q {}", r.qps)
        } else {
            String::new()
        };
        let run = format!("{} {}{qps} run {}", r.test, size_name(r.size), r.rep);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, runs)) => runs.push(run),
            None => groups.push((key, vec![run])),
        }
    }
    groups
        .into_iter()
        .map(|(key, runs)| {
            let mut named = runs[..runs.len().min(NAMED_RUNS)].join(", ");
            if runs.len() > NAMED_RUNS {
                named.push_str(&format!(" and {} more", runs.len() - NAMED_RUNS));
            }
            format!("- {key} ({named})")
        })
        .collect()
}

/// Cells where a tool ran fewer than [`plan::REPS`] times (the time budget
/// ran out before their last repetition).
fn short_cells(records: &[Record]) -> usize {
    plan::TRANSPORTS
        .iter()
        .filter(|&&t| records.iter().any(|r| r.transport == t))
        .flat_map(|&t| plan::cases(t))
        .filter(|case| {
            [Tool::Ferrovia, Tool::Reference]
                .iter()
                .any(|&tool| runs(records, case, tool).attempted < plan::REPS)
        })
        .count()
}

/// The tables with their legend and notes, as markdown.
pub(crate) fn tables(records: &[Record], device: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### ferrovia-perf next to perftest and ucx_perftest\n\n\
         Medians of up to {} runs per tool and cell (\"runs\": how many gave a number, \
         ferrovia+reference), the two tools alternating. Bandwidth: average MB/s \
         (MB = 2^20 bytes), higher is better. Latency: typical (median) one-way µs, \
         half the round trip, lower is better. ferrovia/reference is the ratio of the \
         medians: above 1 is better for bandwidth, below 1 for latency. The `:async` and \
         `:async-busy` rows set ferrovia-async (`ferrovia-perf --async`, futures woken by the \
         transport's event fd, or `--async-busy`, busy polling) next to ferrovia's own \
         scoped path: there the reference is ferrovia-perf without the flag.\n",
        plan::REPS
    );
    main_table(records, device, &mut out);
    if records.iter().any(|r| r.transport == Transport::Verbs) {
        let _ = writeln!(
            out,
            "\n### Queue-pair scaling: write_bw {} on {device}\n\n\
             `-q N`: N queue pairs, {} writes in all spread over them. ferrovia-perf drives \
             each QP from a thread of its own (a `Node` each); ib_write_bw drives all of them \
             from one thread. Under TCG the user-space side of posting and polling is \
             expensive, so a second thread on the second vCPU helps ferrovia; the rows compare \
             the two programs, not the QPs.\n",
            size_name(plan::QP_SIZE),
            plan::iterations(&Case {
                transport: Transport::Verbs,
                pair: plan::VERBS_PAIRS[0],
                size: plan::QP_SIZE,
                qps: 1,
            })
        );
        qp_table(records, &mut out);
    }
    let failed = failures(records, device);
    let short = short_cells(records);
    if !failed.is_empty() || short > 0 {
        out.push_str("\nNotes:\n\n");
        if short > 0 {
            let _ = writeln!(
                out,
                "- {short} cell(s) ran fewer than {} times per tool: the time budget ran out.",
                plan::REPS
            );
        }
        for line in failed {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_compare::plan::QP_SIZE as QP;

    fn record(
        transport: Transport,
        test: &str,
        size: usize,
        tool: Tool,
        rep: usize,
        v: Option<f64>,
    ) -> Record {
        Record {
            transport,
            test: test.into(),
            size,
            qps: 1,
            tool,
            rep,
            outcome: match v {
                Some(value) => Outcome::Measured { value, secs: 1.0 },
                None => Outcome::Failed("the ib_read_bw client timed out after 60 s".into()),
            },
        }
    }

    #[test]
    fn medians_and_sizes() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(size_name(8), "8 B");
        assert_eq!(size_name(4096), "4 KiB");
        assert_eq!(size_name(1 << 20), "1 MiB");
        assert_eq!(size_name(1000), "1000 B");
        assert_eq!(number(123.456), "123");
        assert_eq!(number(12.345), "12.3");
        assert_eq!(number(1.2345), "1.23");
        assert_eq!(number(0.12345), "0.123");
    }

    #[test]
    fn rows_show_medians_ratios_and_gaps() {
        let v = Transport::Verbs;
        let mut records = Vec::new();
        for (rep, (ours, theirs)) in [(10.0, 20.0), (30.0, 40.0), (20.0, 30.0)]
            .into_iter()
            .enumerate()
        {
            records.push(record(
                v,
                "write_bw",
                4096,
                Tool::Ferrovia,
                rep + 1,
                Some(ours),
            ));
            records.push(record(
                v,
                "write_bw",
                4096,
                Tool::Reference,
                rep + 1,
                Some(theirs),
            ));
        }
        records.push(record(v, "read_bw", 8, Tool::Ferrovia, 1, Some(0.25)));
        records.push(record(v, "read_bw", 8, Tool::Reference, 1, None));
        let text = tables(&records, "rxe0");
        assert!(
            text.contains(
                "| rxe0 | write_bw | ib_write_bw | 4 KiB | MB/s | 20.0 | 30.0 | 0.67 | 3+3 |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| rxe0 | read_bw | ib_read_bw | 8 B | MB/s | 0.250 | — | — | 1+0 |"),
            "{text}"
        );
        assert!(
            text.contains("| rxe0 | send_lat | ib_send_lat | 1 MiB | µs typ. | — | — | — | 0+0 |"),
            "{text}"
        );
        assert!(
            text.contains(
                "- rxe0, reference: the ib_read_bw client timed out after 60 s (read_bw 8 B run 1)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(&format!("ran fewer than {} times", plan::REPS)),
            "{text}"
        );
        assert!(text.contains("| 8 | — | — | — | 0+0 |"), "{text}");
        assert!(!text.contains("UCX"), "no UCX records, no UCX rows: {text}");
    }

    #[test]
    fn failures_with_one_reason_share_a_line() {
        let records: Vec<Record> = (1..=10)
            .map(|rep| Record {
                qps: 2,
                ..record(Transport::Verbs, "write_bw", QP, Tool::Ferrovia, rep, None)
            })
            .collect();
        let lines = failures(&records, "rxe0");
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("- rxe0, ferrovia-perf: the ib_read_bw client"),
            "{lines:?}"
        );
        assert!(
            lines[0].contains("(write_bw 64 KiB -q 2 run 1, write_bw"),
            "{lines:?}"
        );
        assert!(lines[0].ends_with("run 8 and 2 more)"), "{lines:?}");
    }

    #[test]
    fn ucx_rows_name_the_ucx_perftest_test() {
        let records = vec![
            record(
                Transport::UcxSm,
                "send_lat",
                8,
                Tool::Ferrovia,
                1,
                Some(2.0),
            ),
            record(
                Transport::UcxSm,
                "send_lat",
                8,
                Tool::Reference,
                1,
                Some(1.0),
            ),
        ];
        let text = tables(&records, "rxe0");
        assert!(
            text.contains("| UCX sm,self | send_lat | ucx_perftest -t tag_lat | 8 B | µs typ. | 2.00 | 1.00 | 2.00 | 1+1 |"),
            "{text}"
        );
        assert!(!text.contains("Queue-pair"), "{text}");
    }
}
