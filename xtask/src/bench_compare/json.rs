//! docs/benchmarks.json: the numbers of docs/benchmarks.md for programs
//! (a user's own plots and dashboards). Every cell of the pair tables
//! (the queue-pair scaling row included) with both tools' medians, each
//! run's number and how many runs started, and every batch_bw run; the
//! machine as the document describes it.

use serde_json::{Value, json};

use super::batch;
use super::parse::{Outcome, Record};
use super::plan::{self, Kind, Tool};
use super::report::{self, median};

/// The version of the document's shape: a reader checks it.
const FORMAT: u32 = 1;

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Bandwidth => "bandwidth",
        Kind::Latency => "latency",
    }
}

/// One tool's side of a cell.
fn side(records: &[Record], case: &plan::Case, tool: Tool) -> Value {
    let runs = report::runs(records, case, tool);
    json!({
        "median": median(&runs.values),
        "values": runs.values,
        "attempted": runs.attempted,
    })
}

/// Why runs of `case` gave no number, one entry per run.
fn failures(records: &[Record], case: &plan::Case) -> Vec<Value> {
    records
        .iter()
        .filter(|r| {
            r.transport == case.transport
                && r.test == case.pair.name
                && r.size == case.size
                && r.qps == case.qps
        })
        .filter_map(|r| match &r.outcome {
            Outcome::Failed(reason) => Some(json!({
                "tool": r.tool.key(),
                "rep": r.rep,
                "reason": reason,
            })),
            Outcome::Measured { .. } => None,
        })
        .collect()
}

/// The pair cells of every transport that has records, in table order.
fn cells(records: &[Record], device: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for transport in plan::TRANSPORTS {
        if !records.iter().any(|r| r.transport == transport) {
            continue;
        }
        for case in plan::cases(transport) {
            let ours = side(records, &case, Tool::Ferrovia);
            let theirs = side(records, &case, Tool::Reference);
            let ratio = match (ours["median"].as_f64(), theirs["median"].as_f64()) {
                (Some(a), Some(b)) if b > 0.0 => Some(a / b),
                _ => None,
            };
            out.push(json!({
                "transport": transport.key(),
                "transport_title": report::transport_title(transport, device),
                "test": case.pair.name,
                "reference_test": case.pair.reference,
                "kind": kind_name(case.pair.kind),
                "unit": case.pair.kind.unit(),
                "bytes": case.size,
                "qps": case.qps,
                "ferrovia": ours,
                "reference": theirs,
                "ratio": ratio,
                "failures": failures(records, &case),
            }));
        }
    }
    out
}

/// Every batch_bw run, as it ran.
fn batches(records: &[batch::Record]) -> Vec<Value> {
    records
        .iter()
        .map(|r| {
            let mut row = json!({
                "transport": r.transport.key(),
                "rails": r.rails,
                "entries": r.entries,
                "bytes": r.size,
                "rep": r.rep,
            });
            match &r.outcome {
                Ok(n) => {
                    row["mb_per_s"] = json!(n.mb_per_s);
                    row["entries_per_s"] = json!(n.entries_per_s);
                    row["submit_ns_per_entry"] = json!(n.submit_ns);
                }
                Err(reason) => row["failed"] = json!(reason),
            }
            row
        })
        .collect()
}

/// The whole document, pretty-printed, ending in a newline.
pub(crate) fn document(
    records: &[Record],
    batch_records: &[batch::Record],
    device: &str,
    machine: &[String],
) -> String {
    let doc = json!({
        "format": FORMAT,
        "generated_by": "cargo xtask bench --compare",
        "machine": machine,
        "units": {
            "bandwidth": "MB/s (MB = 2^20 bytes), average; higher is better",
            "latency": "µs one-way, typical (median), half the round trip; lower is better",
            "ratio": "median of ferrovia / median of the reference",
        },
        "pairs": cells(records, device),
        "batches": batches(batch_records),
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_compare::batch::Numbers;
    use crate::bench_compare::plan::Transport;

    fn run(
        transport: Transport,
        test: &str,
        size: usize,
        tool: Tool,
        rep: usize,
        v: f64,
    ) -> Record {
        Record {
            transport,
            test: test.into(),
            size,
            qps: 1,
            tool,
            rep,
            outcome: Outcome::Measured {
                value: v,
                secs: 1.0,
            },
        }
    }

    fn synthetic() -> (Vec<Record>, Vec<batch::Record>) {
        let tcp = Transport::UcxTcp;
        let mut records = vec![
            run(tcp, "write_bw", 4096, Tool::Ferrovia, 1, 900.0),
            run(tcp, "write_bw", 4096, Tool::Reference, 1, 1000.0),
            run(tcp, "write_bw", 4096, Tool::Ferrovia, 2, 1100.0),
            run(tcp, "write_bw", 4096, Tool::Reference, 2, 1000.0),
            run(tcp, "send_lat", 8, Tool::Ferrovia, 1, 3.0),
        ];
        records.push(Record {
            outcome: Outcome::Failed("the client timed out after 30 s".into()),
            ..run(tcp, "send_lat", 8, Tool::Reference, 1, 0.0)
        });
        let batches = vec![
            batch::Record {
                transport: tcp,
                rails: "2".into(),
                entries: 1000,
                size: 65536,
                rep: 1,
                outcome: Ok(Numbers {
                    mb_per_s: 512.0,
                    entries_per_s: 8192.0,
                    submit_ns: 25.0,
                }),
            },
            batch::Record {
                transport: tcp,
                rails: "1".into(),
                entries: 10,
                size: 8,
                rep: 1,
                outcome: Err("no result".into()),
            },
        ];
        (records, batches)
    }

    #[test]
    fn every_cell_has_both_medians_the_runs_and_the_ratio() {
        let (records, batches) = synthetic();
        let text = document(&records, &batches, "rxe0", &["Host: a CPU".into()]);
        let doc: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["format"], 1);
        assert_eq!(doc["machine"][0], "Host: a CPU");
        let pairs = doc["pairs"].as_array().unwrap();
        // Every UCX cell of a full table is there, the unmeasured too; no
        // verbs cell, since no verbs record.
        assert_eq!(pairs.len(), plan::cases(Transport::UcxTcp).len());
        assert!(pairs.iter().all(|p| p["transport"] == "ucx-tcp"));
        let cell = |test: &str, bytes: usize| {
            pairs
                .iter()
                .find(|p| p["test"] == test && p["bytes"] == bytes)
                .unwrap()
                .clone()
        };
        let w = cell("write_bw", 4096);
        assert_eq!(w["ferrovia"]["median"], 1000.0);
        assert_eq!(w["ferrovia"]["values"], json!([900.0, 1100.0]));
        assert_eq!(w["reference"]["median"], 1000.0);
        assert_eq!(w["ratio"], 1.0);
        assert_eq!(w["unit"], "MB/s");
        assert_eq!(w["reference_test"], "ucp_put_bw");
        let l = cell("send_lat", 8);
        assert_eq!(l["ferrovia"]["median"], 3.0);
        assert_eq!(l["reference"]["median"], Value::Null);
        assert_eq!(l["reference"]["attempted"], 1);
        assert_eq!(l["ratio"], Value::Null);
        assert_eq!(
            l["failures"][0]["reason"],
            "the client timed out after 30 s"
        );
        assert_eq!(l["kind"], "latency");
        let b = doc["batches"].as_array().unwrap();
        assert_eq!(b[0]["submit_ns_per_entry"], 25.0);
        assert_eq!(b[1]["failed"], "no result");
        assert!(text.ends_with("}\n"));
    }
}
