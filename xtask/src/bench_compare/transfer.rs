//! The transfer section of docs/benchmarks.md: the medians of
//! `ferrovia-perf batch_bw` per transport, rails and shape; batch_bw next
//! to the Mooncake Transfer Engine on the cells both ran (throughput ratio,
//! both submission costs); and the UCX goal, 10,000 x 4 KiB against
//! `ucx_perftest -t ucp_put_bw -s 4096` of the same run.

use std::fmt::Write as _;

use super::batch::{self, Record};
use super::mooncake::compare::Anchor;
use super::parse::{self, Outcome};
use super::plan::{self, Tool, Transport};
use super::report::{median, number, transport_title};

/// The UCX goal: batch_bw's 10,000 x 4 KiB at least this share of
/// ucx_perftest's put bandwidth at 4 KiB.
const GOAL: f64 = 0.9;
/// The shape of the UCX goal.
const GOAL_SHAPE: (usize, usize) = (10_000, 4 << 10);

/// The medians of one batch cell.
#[derive(Debug, Clone, Default, PartialEq)]
struct Cell {
    mb_per_s: Option<f64>,
    entries_per_s: Option<f64>,
    submit_ns: Option<f64>,
    runs: usize,
    attempted: usize,
}

fn cell(
    records: &[Record],
    transport: Transport,
    rails: &str,
    entries: usize,
    size: usize,
) -> Cell {
    let mut c = Cell::default();
    let mut got = (Vec::new(), Vec::new(), Vec::new());
    for r in records.iter().filter(|r| {
        r.transport == transport && r.rails == rails && r.entries == entries && r.size == size
    }) {
        c.attempted += 1;
        if let Ok(n) = &r.outcome {
            c.runs += 1;
            got.0.push(n.mb_per_s);
            got.1.push(n.entries_per_s);
            got.2.push(n.submit_ns);
        }
    }
    c.mb_per_s = median(&got.0);
    c.entries_per_s = median(&got.1);
    c.submit_ns = median(&got.2);
    c
}

/// The rail sets of `transport`: UCX's counts, or the device lists the
/// records name, in the order they ran.
fn rail_sets(records: &[Record], transport: Transport) -> Vec<String> {
    let mut sets: Vec<String> = match transport {
        Transport::Verbs => Vec::new(),
        _ => vec!["1".into(), "2".into()],
    };
    for r in records.iter().filter(|r| r.transport == transport) {
        if !sets.contains(&r.rails) {
            sets.push(r.rails.clone());
        }
    }
    sets
}

fn show(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), number)
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn show_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "—".into(), |r| format!("{r:.2}"))
}

/// The transports that ran batches, in table order.
fn transports(records: &[Record]) -> Vec<Transport> {
    plan::TRANSPORTS
        .into_iter()
        .filter(|&t| records.iter().any(|r| r.transport == t))
        .collect()
}

/// The batch_bw table and the two-rail/one-rail ratios under it.
fn batch_table(records: &[Record], device: &str, out: &mut String) {
    out.push_str(
        "| transport | rails | batch | MB/s | entries/s | submit ns/entry | runs |\n\
         |---|---|---|---:|---:|---:|---:|\n",
    );
    let mut ratios = Vec::new();
    for t in transports(records) {
        let sets = rail_sets(records, t);
        for rails in &sets {
            for s in batch::shapes(t) {
                let c = cell(records, t, rails, s.entries, s.size);
                let _ = writeln!(
                    out,
                    "| {} | {rails} | {} | {} | {} | {} | {}/{} |",
                    transport_title(t, device),
                    batch::shape_name(s.entries, s.size),
                    show(c.mb_per_s),
                    show(c.entries_per_s),
                    show(c.submit_ns),
                    c.runs,
                    c.attempted
                );
            }
        }
        let (Some(one), Some(two)) = (
            sets.iter().find(|r| batch::rail_count(r) == 1),
            sets.iter().find(|r| batch::rail_count(r) == 2),
        ) else {
            continue;
        };
        let per_shape: Vec<String> = batch::shapes(t)
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let r = ratio(
                    cell(records, t, two, s.entries, s.size).mb_per_s,
                    cell(records, t, one, s.entries, s.size).mb_per_s,
                );
                // The last shape is the 1 MiB one, soft-RoCE's headline.
                let bold = t == Transport::Verbs && i + 1 == batch::shapes(t).len();
                let r = show_ratio(r);
                let r = if bold { format!("**{r}**") } else { r };
                format!("{} {r}", batch::shape_name(s.entries, s.size))
            })
            .collect();
        ratios.push(format!(
            "- {} `--rails {two}` / `--rails {one}`: {}",
            transport_title(t, device),
            per_shape.join(", ")
        ));
    }
    if !ratios.is_empty() {
        out.push_str("\nTwo rails / one rail (ratio of the MB/s medians):\n\n");
        for line in ratios {
            let _ = writeln!(out, "{line}");
        }
    }
}

/// batch_bw on one rail next to Mooncake, per shared cell.
fn mooncake_table(
    records: &[Record],
    anchors: &[(Transport, &str, &Anchor)],
    device: &str,
    out: &mut String,
) {
    out.push_str(
        "| transport | batch | ferrovia MB/s | Mooncake MB/s | ferrovia/Mooncake | ferrovia submit ns/entry | Mooncake submit µs/entry | runs |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for &(t, title, anchor) in anchors {
        let one = rail_sets(records, t)
            .into_iter()
            .find(|r| batch::rail_count(r) == 1)
            .unwrap_or_else(|| "1".into());
        for s in batch::shapes(t) {
            let ours = cell(records, t, &one, s.entries, s.size);
            let theirs = anchor.cell(s.entries, s.size);
            let mb = theirs.and_then(|m| m.numbers.mb_per_s);
            let _ = writeln!(
                out,
                "| {} ({one}) / {title} | {} | {} | {} | {} | {} | {} | {}+{} |",
                transport_title(t, device),
                batch::shape_name(s.entries, s.size),
                show(ours.mb_per_s),
                show(mb),
                show_ratio(ratio(ours.mb_per_s, mb)),
                show(ours.submit_ns),
                show(theirs.and_then(|m| m.per_entry_us())),
                ours.runs,
                theirs.map_or(0, |m| m.runs)
            );
        }
    }
}

/// The median of `ucx_perftest -t ucp_put_bw -s 4096` on `transport` in
/// this run's pairs.
fn put_bw_4k(pairs: &[parse::Record], transport: Transport) -> Option<f64> {
    let values: Vec<f64> = pairs
        .iter()
        .filter(|r| {
            r.transport == transport
                && r.test == "write_bw"
                && r.size == GOAL_SHAPE.1
                && r.qps == 1
                && r.tool == Tool::Reference
        })
        .filter_map(|r| match r.outcome {
            Outcome::Measured { value, .. } => Some(value),
            Outcome::Failed(_) => None,
        })
        .collect();
    median(&values)
}

/// The UCX goal's table.
fn goal_table(records: &[Record], pairs: &[parse::Record], device: &str, out: &mut String) {
    let (entries, size) = GOAL_SHAPE;
    out.push_str(
        "| transport | rails | batch_bw 10,000 x 4 KiB (MB/s) | ucx_perftest -t ucp_put_bw -s 4096 (MB/s) | batch_bw/ucx_perftest | at least 0.9 |\n\
         |---|---|---:|---:|---:|---|\n",
    );
    for t in [Transport::UcxTcp, Transport::UcxSm] {
        let reference = put_bw_4k(pairs, t);
        for rails in rail_sets(records, t) {
            let ours = cell(records, t, &rails, entries, size).mb_per_s;
            let r = ratio(ours, reference);
            let met = match r {
                Some(r) if r >= GOAL => "yes",
                Some(_) => "no",
                None => "—",
            };
            let _ = writeln!(
                out,
                "| {} | {rails} | {} | {} | {} | {met} |",
                transport_title(t, device),
                show(ours),
                show(reference),
                show_ratio(r)
            );
        }
    }
}

/// The batch runs that gave nothing, and Mooncake's reasons, as note
/// lines (`- ...`).
fn notes(records: &[Record], anchors: &[(Transport, &str, &Anchor)], device: &str) -> Vec<String> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for r in records {
        let Err(reason) = &r.outcome else { continue };
        let key = format!(
            "{} batch_bw --rails {}: {reason}",
            transport_title(r.transport, device),
            r.rails
        );
        let run = format!("{} run {}", batch::shape_name(r.entries, r.size), r.rep);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, runs)) => runs.push(run),
            None => groups.push((key, vec![run])),
        }
    }
    let mut lines: Vec<String> = groups
        .into_iter()
        .map(|(key, runs)| format!("- {key} ({})", runs.join(", ")))
        .collect();
    for &(_, title, anchor) in anchors {
        match &anchor.medians {
            Err(reason) => lines.push(format!("- {title}: not measured: {reason}")),
            Ok(medians) => {
                for m in medians.iter().filter(|m| m.failure.is_some()) {
                    lines.push(format!(
                        "- {title} {}: {} of {} run(s) gave nothing: {}",
                        batch::shape_name(m.entries, m.size),
                        m.attempted - m.runs,
                        m.attempted,
                        m.failure.as_deref().unwrap_or_default()
                    ));
                }
            }
        }
        lines.extend(anchor.notes.iter().map(|n| format!("- {title}: {n}")));
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let root = crate::workspace::root().to_string_lossy().into_owned();
    lines.iter().map(|l| scrub(l, &root, &home)).collect()
}

/// `line` without this machine's paths (a reason may quote one; the
/// document must not): the workspace as `.`, the home as `~`, `/tmp/` as
/// `TMPDIR/`.
fn scrub(line: &str, root: &str, home: &str) -> String {
    let mut out = line.to_string();
    for (from, to) in [(root, "."), (home, "~")] {
        if from.len() > 1 {
            out = out.replace(from, to);
        }
    }
    out.replace("/tmp/", "TMPDIR/")
}

/// `-n` of each shape on `transport`, as text (`30, 2, 20, 2`).
fn batches(transport: Transport) -> String {
    let n: Vec<String> = batch::shapes(transport)
        .iter()
        .map(|s| s.batches.to_string())
        .collect();
    n.join(", ")
}

/// The transfer section: `records` (batch_bw), `pairs` (the pairs' runs,
/// for ucx_perftest's put bandwidth), `anchors` (Mooncake over a
/// transport, its title, its results).
pub(crate) fn section(
    records: &[Record],
    pairs: &[parse::Record],
    anchors: &[(Transport, &str, &Anchor)],
    device: &str,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### The transfer layer: ferrovia-perf batch_bw\n\n\
         `ferrovia-perf batch_bw` (ferrovia-transfer): the client writes ENTRIES x SIZE from \
         one registered segment into the server's as one batch over the rails, one warm-up \
         batch and then `-n` timed batches ({} for the four shapes on the host, {} on \
         soft-RoCE), the last with a notification the server waits for; entries wrap around \
         segments of at most 256 MiB. MB/s (MB = 2^20 bytes) and entries/s over the timed \
         batches; submit ns/entry: the time inside `submit` / entries. Rails: on UCX a count \
         (`--rails 1`, `--rails 2`), in the VM device names: {device} alone, and {device} with \
         the VM's second soft-RoCE device (each on a dummy netdev of its own, see \
         docs/soft-roce.md). Soft-RoCE under TCG moves ~60 MB/s, so there the 1 MiB shape is \
         200 x 1 MiB, not 1,000 x 1 MiB (17 s a batch), for Mooncake too. Medians of up to \
         {} runs per cell (runs: measured/attempted), run after the pairs above in the same \
         VM boot or on the host.\n",
        batches(Transport::UcxTcp),
        batches(Transport::Verbs),
        plan::REPS
    );
    batch_table(records, device, &mut out);
    if records.iter().any(|r| r.transport == Transport::Verbs) {
        out.push_str(
            "\nUnder TCG on 2 host cores two soft-RoCE rails give no more than one: both \
             devices' work runs on the same two emulated vCPUs (docs/soft-roce.md measured the \
             same for ib_write_bw over both at once).\n",
        );
    }
    let _ = writeln!(
        out,
        "\n### batch_bw next to the Mooncake Transfer Engine\n\n\
         Mooncake: te_bench.py (benches/mooncake, docs/mooncake.md), its async mode: \
         `batch_transfer_async_write` (timed alone: µs/entry is the time inside it / N, the \
         Python binding's conversion of the lists included), then the wait for the batch's \
         status; one batch a run, the target zeroed before and every block's CRC checked \
         after (outside the timing); every entry writes its own block of one registration \
         N x S large. Over tcp: its TCP transport (`MC_FORCE_TCP=1`) in a network namespace \
         with only lo, next to batch_bw over UCX tcp on loopback; over rdma: its RDMA \
         transport on {device}, in the same VM boot right after the batch_bw runs, next to \
         batch_bw on {device} alone. ferrovia's row is one rail; ferrovia/Mooncake is the \
         ratio of the MB/s medians (above 1: ferrovia moves more). runs: ferrovia+Mooncake.\n\n\
         The two submission costs are not the same work. ferrovia's `submit` checks the batch \
         and posts the first runs itself: over UCX and soft-RoCE the CPU moves the bytes \
         inside the post, so its ns/entry includes copying (hence microseconds per entry at \
         64 KiB and 1 MiB). The transport-free software cost is the criterion bench `cargo \
         bench -p ferrovia-transfer --bench submit`: 19.6-28.4 ns/entry for 1 rail and \
         20.8-31.9 for 2 rails from 1,000 to 1,000,000 entries (measured 2026-12-02). \
         Mooncake's async call returns once the engine has taken the entries; its worker \
         threads move the bytes after that.\n"
    );
    mooncake_table(records, anchors, device, &mut out);
    let _ = writeln!(
        out,
        "\n### The UCX goal: one batch of 10,000 x 4 KiB next to ucx_perftest\n\n\
         The goal: 10,000 x 4 KiB as one batch reach at least {GOAL} of `ucx_perftest -t \
         ucp_put_bw -s 4096`, over tcp and over shared memory. The reference is the median \
         of this run's write_bw 4 KiB reference column above. ucx_perftest reuses one \
         cache-hot 4 KiB buffer, while batch_bw writes a 40 MB span on each side (10,000 \
         distinct blocks), so the batch also pays for memory that is not in cache. Measured \
         by hand earlier on this host: ucx_perftest put_bw 4 KiB tcp 877 MB/s, sm 49,010 \
         MB/s.\n"
    );
    goal_table(records, pairs, device, &mut out);
    let lines = notes(records, anchors, device);
    if !lines.is_empty() {
        out.push_str("\nNotes on the transfer rows:\n\n");
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

#[cfg(test)]
mod tests;
