//! Mooncake in `bench --compare`: te_bench.py over tcp on the host and
//! over rdma on soft-RoCE inside the VM boot of the verbs pairs, on the
//! batch shapes of `ferrovia-perf batch_bw` there, in async mode only (the
//! submission timed alone, then the wait: the pair of numbers that sets
//! against batch_bw's), and what the report makes of its JSON lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::records::{self, Median};
use super::venv::Venv;
use super::{Options, Run, Transport};
use crate::bench_compare::batch;
use crate::bench_compare::plan;

/// The mode of `bench --compare`'s rows.
pub(crate) const MODE: &str = "async";

/// te_bench.py's options for `bench --compare` over `transport` (the
/// shapes of batch_bw on `shapes_of`), starting no run after `budget`.
pub(crate) fn options(shapes_of: plan::Transport, budget: Duration) -> Options {
    let shapes = batch::shapes(shapes_of)
        .iter()
        .map(|s| (s.entries, s.size))
        .collect();
    let vm = shapes_of == plan::Transport::Verbs;
    Options {
        shapes,
        modes: vec![MODE],
        reps: plan::REPS,
        lat_iters: 0,
        // One 10,000 x 64 KiB batch, verification included, takes ~20 s
        // under TCG; 1,000 x 1 MiB ~5 s on the host.
        cell_timeout: Duration::from_secs(if vm { 150 } else { 120 }),
        budget,
        vm_mem: String::new(),
    }
}

/// What the guest is told: the venv's interpreter (the host made the venv
/// before the boot; the guest sees the host's files read-only) and where
/// the JSON lines go (in the shared workspace).
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) python: PathBuf,
    pub(crate) out: PathBuf,
}

/// Runs te_bench.py over rdma on `device` within `budget` for the verbs
/// stage (in the VM, or on the host's RDMA device); `Some(reason)` when it
/// failed or could not start.
pub(crate) fn run_rdma(
    job: &Job,
    device: &str,
    budget: Duration,
) -> crate::failure::Result<Option<String>> {
    if budget < Duration::from_secs(1) {
        return Ok(Some("no time left in the budget for Mooncake".into()));
    }
    let venv = Venv {
        python: job.python.clone(),
    };
    let transport = Transport::Rdma {
        device: device.to_string(),
    };
    super::run_into(
        &venv,
        &transport,
        &options(plan::Transport::Verbs, budget),
        &job.out,
    )
}

/// Runs te_bench.py over tcp on the host within `budget`, its JSON lines
/// appended to `out`.
pub(crate) fn run_tcp(
    venv: &Venv,
    out: &Path,
    budget: Duration,
) -> crate::failure::Result<Option<String>> {
    if budget < Duration::from_secs(1) {
        return Ok(Some("no time left in the budget for Mooncake".into()));
    }
    super::run_into(
        venv,
        &Transport::Tcp,
        &options(plan::Transport::UcxTcp, budget),
        out,
    )
}

/// Mooncake's side of the transfer table over one transport.
#[derive(Debug, Clone)]
pub(crate) struct Anchor {
    /// The medians of the async runs, or why there are none.
    pub(crate) medians: Result<Vec<Median>, String>,
    /// What went wrong around the runs, for the notes.
    pub(crate) notes: Vec<String>,
    /// te_bench.py's `config` record (versions, MC_ variables, netns).
    pub(crate) config: BTreeMap<String, String>,
}

impl Anchor {
    /// No Mooncake here, and why.
    pub(crate) fn skipped(reason: &str) -> Anchor {
        Anchor {
            medians: Err(reason.to_string()),
            notes: Vec::new(),
            config: BTreeMap::new(),
        }
    }

    /// What te_bench.py's JSON lines in `text` say, `failure` being how
    /// its run ended if it did not end well.
    pub(crate) fn from_text(text: &str, failure: Option<String>) -> Anchor {
        let run = Run::from_text(text);
        let mut notes = run.notes.clone();
        let medians: Vec<Median> = records::medians(&run.runs)
            .into_iter()
            .filter(|m| m.mode == MODE)
            .collect();
        if medians.is_empty() {
            return Anchor {
                medians: Err(failure.unwrap_or_else(|| "te_bench.py gave no runs".into())),
                notes,
                config: run.config,
            };
        }
        notes.extend(failure);
        Anchor {
            medians: Ok(medians),
            notes,
            config: run.config,
        }
    }

    /// The median of `entries` x `size`, if it was run.
    pub(crate) fn cell(&self, entries: usize, size: usize) -> Option<&Median> {
        self.medians
            .as_ref()
            .ok()?
            .iter()
            .find(|m| m.entries == entries && m.size == size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_follow_batch_bw_shapes() {
        let vm = options(plan::Transport::Verbs, Duration::from_secs(200));
        assert_eq!(
            vm.shapes,
            [
                (10_000, 4096),
                (10_000, 65536),
                (1_000, 65536),
                (200, 1 << 20)
            ]
        );
        assert_eq!((vm.modes.as_slice(), vm.lat_iters), (&["async"][..], 0));
        let host = options(plan::Transport::UcxTcp, Duration::from_secs(100));
        assert_eq!(host.shapes[3], (1_000, 1 << 20));
        assert_eq!(host.budget, Duration::from_secs(100));
    }

    #[test]
    fn an_anchor_keeps_async_medians_or_says_why_there_are_none() {
        let text = r#"{"te_bench": 1, "kind": "config", "protocol": "tcp", "mooncake": "0.3.13.post1"}
{"te_bench": 1, "protocol": "tcp", "kind": "batch", "mode": "async", "entries": 1000, "size": 4096, "rep": 1, "ok": true, "secs": 0.08, "submit_us_per_entry": 6.8, "call_us_per_entry": 6.8, "mb_per_s": 48.8, "entries_per_s": 12500.0}
{"te_bench": 1, "protocol": "tcp", "kind": "batch", "mode": "sync", "entries": 1000, "size": 4096, "rep": 1, "ok": true, "secs": 0.08, "call_us_per_entry": 80, "mb_per_s": 40, "entries_per_s": 10000.0}"#;
        let anchor = Anchor::from_text(text, Some("te_bench.py ended with exit status: 1".into()));
        let cell = anchor.cell(1000, 4096).unwrap();
        assert_eq!(cell.numbers.mb_per_s, Some(48.8));
        assert_eq!(anchor.medians.as_ref().unwrap().len(), 1, "async only");
        assert!(anchor.cell(10, 4096).is_none());
        assert_eq!(anchor.notes, ["te_bench.py ended with exit status: 1"]);
        assert_eq!(anchor.config["mooncake"], "0.3.13.post1");
        let none = Anchor::from_text("", Some("cannot start te_bench.py".into()));
        assert_eq!(none.medians.unwrap_err(), "cannot start te_bench.py");
        let skipped = Anchor::skipped("FERROVIA_MOONCAKE=skip");
        assert!(skipped.cell(1000, 4096).is_none());
        assert_eq!(skipped.medians.unwrap_err(), "FERROVIA_MOONCAKE=skip");
    }
}
