//! `cargo xtask bench barrier`: the barrier algorithms of `ferrovia-node`
//! against each other (`cargo xtask bench --compare` is
//! [`crate::bench_compare`]). Builds `ferrovia-rank` optimized, runs
//! `ferrovia-rank barrier-bench ALGO 200` as 2, 4, 8 and 16 ranks of one job
//! for every algorithm, all in one VM boot (or on the host's RDMA device),
//! and prints the medians and the p99s as two markdown tables.
//!
//! Inside the VM, xtask runs itself (hidden `bench-barrier-sweep FILE
//! PROGRAM`): the guest appends one record per run to FILE in the shared
//! workspace, which the host reads once the VM is gone.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::cargo_artifacts::{self, RANK};
use crate::failure::{Failure, Result};
use crate::ranks::{self, Job};
use crate::vm::{self, VmOptions};
use crate::workspace::{ScratchFile, append_line};
use crate::{cmd, deps, rdma_devices, signals, workspace};

/// The table's columns, as `ferrovia-rank barrier-bench` names them.
const ALGORITHMS: [&str; 3] = ["dissemination", "centralized", "tree"];
/// The table's rows.
const RANK_COUNTS: [usize; 4] = [2, 4, 8, 16];
/// Timed barriers per run (after 10 untimed ones).
const ITERS: usize = 200;
/// One run (bootstrap included): 16 ranks on 2 emulated vCPUs are slow.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);
/// The rendezvous of 16 ranks under TCG takes far longer than natively.
const BOOTSTRAP_TIMEOUT_MS: &str = "240000";
/// The whole sweep in the VM, boot included.
const VM_TIMEOUT: Duration = Duration::from_secs(1200);
/// vCPUs of the VM (the `cargo xtask vm` default for one guest).
const VM_CPUS: u32 = 2;

/// `cargo xtask bench barrier`.
pub(crate) fn barrier() -> Result<u8> {
    workspace::enter_root()?;
    deps::ensure(deps::ALL)?;
    let program = cargo_artifacts::build_program(RANK, true)?;
    let file = ScratchFile::new("bench-barrier")?;
    let devices = rdma_devices::host_devices();
    let (where_, result) = if let Some(device) = devices.first() {
        say!("xtask bench: host RDMA device {device}: running the barrier sweep here");
        signals::catch_termination();
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
        let result = sweep(&program, file.path()).map(|_| 0);
        (
            format!("this host, RDMA device {device}, {cpus} CPUs"),
            result,
        )
    } else {
        let accel = vm::default_accel_name();
        say!(
            "xtask bench: no RDMA device on this host: running the barrier sweep in one VM \
             ({VM_CPUS} vCPUs under {accel}; cargo xtask vm)"
        );
        let command = vec![
            cmd::xtask_exe()?,
            "bench-barrier-sweep".into(),
            file.path().into(),
            program.into_os_string(),
        ];
        let mut options = VmOptions::new(command);
        options.timeout = VM_TIMEOUT;
        options.smp = Some(VM_CPUS);
        (
            format!(
                "one VM with {VM_CPUS} vCPUs under {accel}, soft-RoCE rxe0: 4 or more ranks \
                 oversubscribe the CPUs, so those rows measure the scheduler as much as the barrier"
            ),
            vm::run(&options),
        )
    };
    let text = file.read();
    let measurements: Vec<Measurement> = text.lines().filter_map(parse_record).collect();
    say!("\n{}", report(&measurements, &where_));
    let status = result?;
    let complete = ALGORITHMS.len() * RANK_COUNTS.len();
    let good = measurements.iter().filter(|m| m.result.is_some()).count();
    if status != 0 || good != complete {
        return Err(Failure::new(format!(
            "{good} of {complete} barrier runs gave a result (exit status {status})"
        )));
    }
    Ok(0)
}

/// `xtask bench-barrier-sweep FILE PROGRAM` (hidden): the sweep itself, as
/// `cargo xtask bench barrier` runs it inside the VM.
pub(crate) fn sweep_command(file: &Path, program: &Path) -> Result<u8> {
    signals::catch_termination();
    if sweep(program, file)? {
        Ok(0)
    } else {
        Err(Failure::new("some barrier runs failed"))
    }
}

/// Every algorithm for every rank count; appends one record per run to
/// `file` as it goes. Whether every run gave a result.
fn sweep(program: &Path, file: &Path) -> Result<bool> {
    sweep_until(program, file, None)
}

/// A run may go on this long past the deadline of [`sweep_until`].
const DEADLINE_GRACE: Duration = Duration::from_secs(30);

/// [`sweep`] on a time budget (`cargo xtask bench --compare` runs it with
/// what is left of its own): no run starts after `deadline`, and none
/// lasts past it by more than [`DEADLINE_GRACE`]. Runs not started leave
/// no record.
pub(crate) fn sweep_until(program: &Path, file: &Path, deadline: Option<Instant>) -> Result<bool> {
    let mut all_good = true;
    for ranks in RANK_COUNTS {
        for algorithm in ALGORITHMS {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|left| left.is_zero()) {
                say!("xtask bench: time budget used up: no more barrier runs");
                return Ok(false);
            }
            say!("xtask bench: barrier-bench {algorithm} {ITERS} with {ranks} ranks");
            let mut job = Job::new(
                program.to_path_buf(),
                ranks,
                vec![
                    "barrier-bench".into(),
                    algorithm.into(),
                    ITERS.to_string().into(),
                ],
            );
            job.timeout = left.map_or(RUN_TIMEOUT, |left| RUN_TIMEOUT.min(left + DEADLINE_GRACE));
            job.env.push((
                "FERROVIA_BOOTSTRAP_TIMEOUT_MS".into(),
                BOOTSTRAP_TIMEOUT_MS.into(),
            ));
            let finished = ranks::run(&job)?;
            let result = match finished.verdict() {
                Ok(()) => finished.stdout[0]
                    .iter()
                    .find_map(|line| parse_barrier_line(line))
                    .filter(|line| line.ranks == ranks),
                Err(failure) => {
                    say!("xtask bench: {algorithm} with {ranks} ranks failed: {failure}");
                    None
                }
            };
            all_good &= result.is_some();
            let measurement = Measurement {
                algorithm: algorithm.into(),
                ranks,
                result,
            };
            append_line(file, &to_record(&measurement))?;
        }
    }
    Ok(all_good)
}

/// Rank 0's summary line: `barrier ranks=N median_us=X p99_us=Y`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct BarrierLine {
    ranks: usize,
    median_us: f64,
    p99_us: f64,
}

/// Reads a [`BarrierLine`]; `None` for any other line.
fn parse_barrier_line(line: &str) -> Option<BarrierLine> {
    let mut words = line.split_whitespace();
    if words.next()? != "barrier" {
        return None;
    }
    let (mut ranks, mut median_us, mut p99_us) = (None, None, None);
    for word in words {
        let (key, value) = word.split_once('=')?;
        match key {
            "ranks" => ranks = value.parse().ok(),
            "median_us" => median_us = value.parse().ok().filter(|v: &f64| v.is_finite()),
            "p99_us" => p99_us = value.parse().ok().filter(|v: &f64| v.is_finite()),
            _ => {}
        }
    }
    Some(BarrierLine {
        ranks: ranks?,
        median_us: median_us?,
        p99_us: p99_us?,
    })
}

/// One run of the sweep: `result` is `None` when it failed.
#[derive(Debug, Clone, PartialEq)]
struct Measurement {
    algorithm: String,
    ranks: usize,
    result: Option<BarrierLine>,
}

/// `ALGO RANKS barrier ranks=...` or `ALGO RANKS failed`.
fn to_record(m: &Measurement) -> String {
    match m.result {
        Some(r) => format!(
            "{} {} barrier ranks={} median_us={} p99_us={}",
            m.algorithm, m.ranks, r.ranks, r.median_us, r.p99_us
        ),
        None => format!("{} {} failed", m.algorithm, m.ranks),
    }
}

/// Inverse of [`to_record`].
fn parse_record(line: &str) -> Option<Measurement> {
    let mut parts = line.splitn(3, ' ');
    let algorithm = parts.next()?.to_string();
    let ranks = parts.next()?.parse().ok()?;
    let rest = parts.next()?;
    let result = if rest == "failed" {
        None
    } else {
        Some(parse_barrier_line(rest)?)
    };
    Some(Measurement {
        algorithm,
        ranks,
        result,
    })
}

/// The two tables from the records of [`sweep_until`] among the lines of
/// `text` (other lines are skipped); `None` without any.
pub(crate) fn tables_from_records(text: &str, where_: &str) -> Option<String> {
    let measurements: Vec<Measurement> = text.lines().filter_map(parse_record).collect();
    if measurements.is_empty() {
        return None;
    }
    let mut tables = report(&measurements, where_);
    let left_out = (ALGORITHMS.len() * RANK_COUNTS.len()).saturating_sub(measurements.len());
    if left_out > 0 {
        let _ = write!(
            tables,
            "\n{left_out} run(s) left out by the time budget show as `failed` too.\n"
        );
    }
    Some(tables)
}

/// Picks one number of a run for a table.
type Cell = fn(&BarrierLine) -> f64;

/// The two tables (median, p99) with a heading saying where they were
/// measured. Missing or failed runs show as `failed`.
fn report(measurements: &[Measurement], where_: &str) -> String {
    let mut out = format!(
        "## Barrier latency: ferrovia-rank barrier-bench ALGO {ITERS} (release build)\n\n\
         Measured on {where_}.\n"
    );
    let tables: [(&str, Cell); 2] = [("Median", |r| r.median_us), ("p99", |r| r.p99_us)];
    for (title, value) in tables {
        let _ = write!(out, "\n{title} (µs):\n\n| ranks |");
        for algorithm in ALGORITHMS {
            let _ = write!(out, " {algorithm} |");
        }
        out.push_str("\n|---:|");
        out.push_str(&"---:|".repeat(ALGORITHMS.len()));
        for ranks in RANK_COUNTS {
            let _ = write!(out, "\n| {ranks} |");
            for algorithm in ALGORITHMS {
                let cell = measurements
                    .iter()
                    .rfind(|m| m.algorithm == algorithm && m.ranks == ranks)
                    .and_then(|m| m.result.as_ref())
                    .map_or_else(|| "failed".into(), |r| format!("{:.1}", value(r)));
                let _ = write!(out, " {cell} |");
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rank_zeros_line() {
        assert_eq!(
            parse_barrier_line("barrier ranks=16 median_us=812.5 p99_us=20493.0"),
            Some(BarrierLine {
                ranks: 16,
                median_us: 812.5,
                p99_us: 20493.0
            })
        );
        assert_eq!(
            parse_barrier_line("  barrier p99_us=3 ranks=2 median_us=1.5 extra=x"),
            Some(BarrierLine {
                ranks: 2,
                median_us: 1.5,
                p99_us: 3.0
            })
        );
        for other in [
            "",
            "rank 0: in barrier loop",
            "barrier ranks=2 median_us=1.0",
            "barrier ranks=x median_us=1 p99_us=2",
            "barrier ranks=2 median_us=NaN p99_us=2",
            "barrier ranks=2 median_us 1 p99_us=2",
            "barriers ranks=2 median_us=1 p99_us=2",
        ] {
            assert_eq!(parse_barrier_line(other), None, "{other:?}");
        }
    }

    #[test]
    fn records_round_trip() {
        let good = Measurement {
            algorithm: "tree".into(),
            ranks: 8,
            result: Some(BarrierLine {
                ranks: 8,
                median_us: 99.25,
                p99_us: 1000.0,
            }),
        };
        let failed = Measurement {
            algorithm: "centralized".into(),
            ranks: 16,
            result: None,
        };
        for m in [&good, &failed] {
            assert_eq!(parse_record(&to_record(m)).as_ref(), Some(m));
        }
        assert_eq!(to_record(&failed), "centralized 16 failed");
        assert_eq!(parse_record("tree 8"), None);
        assert_eq!(parse_record("tree x failed"), None);
    }

    #[test]
    fn tables_come_from_the_records_among_other_lines() {
        let text = "info guest_kernel 6.1.0\n\
                    run verbs write_bw 8 1 ferrovia 1 ok 0.15 2.0\n\
                    tree 2 barrier ranks=2 median_us=5 p99_us=9\n";
        let tables = tables_from_records(text, "a VM").unwrap();
        assert!(tables.contains("| 2 | failed | failed | 5.0 |"), "{tables}");
        assert!(tables.contains("11 run(s) left out"), "{tables}");
        assert_eq!(tables_from_records("info x y\n", "a VM"), None);
    }

    #[test]
    fn report_has_a_row_per_rank_count_and_a_column_per_algorithm() {
        let m = |algorithm: &str, ranks, median_us| Measurement {
            algorithm: algorithm.into(),
            ranks,
            result: Some(BarrierLine {
                ranks,
                median_us,
                p99_us: median_us * 10.0,
            }),
        };
        let text = report(
            &[
                m("dissemination", 2, 10.0),
                m("tree", 2, 12.34),
                m("tree", 16, 5.0),
            ],
            "a test",
        );
        assert!(text.contains("Measured on a test."), "{text}");
        assert!(
            text.contains(
                "Median (µs):\n\n| ranks | dissemination | centralized | tree |\n\
                 |---:|---:|---:|---:|\n| 2 | 10.0 | failed | 12.3 |\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("| 16 | failed | failed | 5.0 |\n\np99"),
            "{text}"
        );
        assert!(text.contains("| 2 | 100.0 | failed | 123.4 |"), "{text}");
        assert!(
            text.ends_with("| 16 | failed | failed | 50.0 |\n"),
            "{text}"
        );
    }
}
