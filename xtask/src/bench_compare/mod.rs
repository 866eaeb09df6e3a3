//! `cargo xtask bench --compare`: `ferrovia-perf` next to the reference
//! tools, in one command. Builds `ferrovia-perf` optimized; runs every
//! verbs test pair (ferrovia-perf and perftest, alternating, several
//! times) on soft-RoCE `rxe0` in one VM boot (or on the host's RDMA
//! device), then every UCX pair (ferrovia-perf over UCX and
//! `ucx_perftest`) on the host with `UCX_TLS=tcp` and `UCX_TLS=sm,self`;
//! prints one table of medians and ratios plus the queue-pair scaling row,
//! and writes them to docs/benchmarks.md with a description of the machine.
//! The transfer layer joins it in the same run ([`stages`]): in the VM
//! boot, after the verbs pairs, `ferrovia-perf batch_bw` on `rxe0` and on
//! `rxe0,rxe1`, then the Mooncake Transfer Engine over rdma on `rxe0`; on
//! the host, after the UCX pairs, batch_bw over UCX tcp and shared memory
//! with one and two rails, then Mooncake over tcp ([`transfer`] sets them
//! side by side, with the UCX goal against `ucx_perftest`).
//!
//! Inside the VM xtask runs itself (hidden `bench-compare-sweep FILE PERF
//! BUDGET_SECS --barrier RANK [--mooncake PYTHON OUT]`): the guest appends
//! one record per run to FILE in the shared workspace, which the host
//! reads once the VM is gone (Mooncake's JSON lines go to OUT); the host's
//! runs append to the same file. What is left of the verbs budget goes to
//! the barrier sweep of `cargo xtask bench barrier`, whose tables follow
//! the others. A run that fails or times out becomes a `—` cell with its
//! reason under the table; every stage has a deadline, and the whole
//! command keeps to [`TOTAL_BUDGET`] by starting no new measurement once
//! its share of the budget is spent. `--ucx-only` runs the UCX pairs and
//! batch_bw over UCX alone and only prints their tables.

mod batch;
mod doc;
mod json;
pub(crate) mod mooncake;
mod pair;
mod pairs;
mod parse;
mod plan;
mod plot;
mod report;
mod stages;
mod transfer;
pub(crate) mod ucx_versions;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use self::mooncake::compare::{Anchor, Job};
use self::pair::{Limits, Ports};
use self::parse::{Outcome, Record};
pub(crate) use self::plan::Transport;
use self::plan::{Case, Tool};
use crate::cargo_artifacts::{self, Program, RANK};
use crate::failure::{Failure, Result, io_failure};
use crate::vm::{self, VmOptions};
use crate::workspace::{ScratchFile, append_line};
use crate::{bench, cmd, deps, rdma_devices, signals, workspace};

/// The UCX reference tool, from the PATH.
const UCX_PERFTEST: &str = "ucx_perftest";
/// The benchmark program.
const PERF: Program = Program::Bin {
    package: "ferrovia-benches",
    name: "ferrovia-perf",
};
/// The whole command, build included: no new measurement starts after
/// this (minus the time the report needs). The stages' shares
/// ([`stages::VERBS_BUDGET`], [`stages::HOST_BUDGET`]) fill it; a run that
/// started before it may overrun it by its own deadline (Mooncake's over
/// tcp: 120 s), so the command ends within ~50 min; with 3 repetitions
/// it took 15 on this 2-core host (2026-12-02), with 5 about 25.
const TOTAL_BUDGET: Duration = Duration::from_secs(48 * 60);
/// Time for the VM boot and the last run after the verbs budget (a
/// Mooncake run in progress may overrun it by its 150 s deadline, the
/// barrier sweep's last run by 30 s).
const VM_MARGIN: Duration = Duration::from_secs(180);
/// Kept for writing the report.
const REPORT_MARGIN: Duration = Duration::from_secs(15);
/// vCPUs of the VM (the `cargo xtask vm` default for one guest).
const VM_CPUS: u32 = 2;
/// Guest RAM: Mooncake registers 640 MiB a side for 10,000 x 64 KiB
/// (te_bench.py checks that twice that is free), batch_bw 256 MiB a side.
const VM_MEM: &str = "4G";
/// The first TCP port of the runs (each run takes fresh ones).
const FIRST_PORT: u16 = 21000;
/// Deadlines of one run under TCG: process start-up alone takes seconds.
const VM_LIMITS: Limits = Limits {
    listen: Duration::from_secs(30),
    client: Duration::from_secs(60),
    server_exit: Duration::from_secs(10),
};
/// Deadlines of one native run.
const HOST_LIMITS: Limits = Limits {
    listen: Duration::from_secs(15),
    client: Duration::from_secs(30),
    server_exit: Duration::from_secs(5),
};
/// Where the report goes, relative to the workspace root.
const DOC: &str = "docs/benchmarks.md";
/// Beside it (file names in the same directory): every number of its
/// tables for programs, and the plot of the ratios that it shows.
const JSON: &str = "benchmarks.json";
const PLOT: &str = "benchmarks-ratios.svg";

/// `cargo xtask bench --compare [--ucx-only]`.
pub(crate) fn command(ucx_only: bool) -> Result<u8> {
    if ucx_only {
        return ucx_only_command();
    }
    let started = Instant::now();
    workspace::enter_root()?;
    deps::ensure(deps::ALL)?;
    let perf = cargo_artifacts::build_program(PERF, true)?;
    let rank = cargo_artifacts::build_program(RANK, true)?;
    let scratch = ScratchFile::new("bench-compare")?;
    let file = scratch.path();
    let budget_end = started + TOTAL_BUDGET - REPORT_MARGIN;
    let mut notes = Vec::new();
    // Before the VM boot: the guest can use the venv, not make it.
    let venv = mooncake::venv::prepare()?;
    if let Err(reason) = &venv {
        say!("xtask bench: no Mooncake rows: {reason}");
    }
    let rdma_out = ScratchFile::new("bench-compare-mooncake-rdma")?;
    let tcp_out = ScratchFile::new("bench-compare-mooncake-tcp")?;
    let job = venv.as_ref().ok().map(|v| Job {
        python: v.python.clone(),
        out: rdma_out.path().to_path_buf(),
    });

    let verbs_budget = stages::VERBS_BUDGET.min(
        budget_end
            .saturating_duration_since(Instant::now())
            .saturating_sub(stages::HOST_BUDGET + VM_MARGIN),
    );
    let device = match rdma_devices::host_devices().into_iter().next() {
        Some(device) => {
            say!("xtask bench: host RDMA device {device}: verbs pairs run here");
            signals::catch_termination();
            let place = format!("this host, device {device}");
            append_line(file, &parse::to_info("verbs_place", &place))?;
            let sweep = Sweep {
                perftest: Path::new(UCX_PERFTEST),
                reps: 1..=plan::REPS,
                perf: &perf,
                device: &device,
                file,
                transports: &[Transport::Verbs],
                deadline: Instant::now() + verbs_budget,
                limits: HOST_LIMITS,
            };
            stages::verbs(&sweep, Some(&rank), job.as_ref())?;
            device
        }
        None => {
            verbs_in_vm(&perf, &rank, file, verbs_budget, job.as_ref(), &mut notes)?;
            "rxe0".to_string()
        }
    };

    signals::catch_termination();
    let ends = stages::deadlines(Instant::now(), &stages::HOST_SHARES, budget_end);
    let tcp_failure = ucx_stages(
        &perf,
        &device,
        file,
        &ends,
        venv.as_ref().ok(),
        tcp_out.path(),
    )?;

    let text = scratch.read();
    let records: Vec<Record> = text.lines().filter_map(parse::parse_record).collect();
    let info: BTreeMap<String, String> = text.lines().filter_map(parse::parse_info).collect();
    let batches: Vec<batch::Record> = text.lines().filter_map(batch::parse_line).collect();
    let (tcp, rdma) = match &venv {
        Ok(_) => (
            Anchor::from_text(&tcp_out.read(), tcp_failure),
            Anchor::from_text(&rdma_out.read(), info.get("mooncake_failed").cloned()),
        ),
        Err(reason) => (Anchor::skipped(reason), Anchor::skipped(reason)),
    };
    let rdma_title = format!("Mooncake rdma {device}");
    let anchors = [
        (Transport::UcxTcp, "Mooncake tcp", &tcp),
        (Transport::Verbs, rdma_title.as_str(), &rdma),
    ];
    let mut tables = report::tables(&records, &device);
    tables.push('\n');
    tables.push_str(&transfer::section(&batches, &records, &anchors, &device));
    let barrier_place = info.get("verbs_place").map_or("", String::as_str);
    if let Some(barrier) = bench::tables_from_records(&text, barrier_place) {
        tables.push_str(&format!(
            "\n#{barrier}\nThe sweep of `cargo xtask bench barrier` (ferrovia-rank, not \
             ferrovia-perf), run in the same boot after the verbs pairs with what was left of \
             their time budget.\n"
        ));
    }
    let mut machine = doc::machine(&info, &PERF.cargo_line(true), started.elapsed());
    machine.insert(machine.len() - 1, doc::mooncake_line(&venv, &tcp, &rdma));
    say!("\n{tables}");
    for note in &notes {
        say!("xtask bench: {note}");
    }
    let docs = workspace::root().join("docs");
    let plotted = write_machine_readable(&docs, &records, &batches, &device, &machine)?;
    let doc_path = workspace::root().join(DOC);
    let old = std::fs::read_to_string(&doc_path).unwrap_or_default();
    let doc = doc::document(&machine, &tables, &notes, plotted);
    let doc = doc::keep_design_measurements(doc, &old);
    std::fs::write(&doc_path, doc)
        .map_err(|e| io_failure(format!("cannot write {}", doc_path.display()), e))?;
    let measured = records
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Measured { .. }))
        .count();
    let batched = batches.iter().filter(|r| r.outcome.is_ok()).count();
    say!(
        "xtask bench: {measured} of {} pair runs and {batched} of {} batch runs measured in {} s; \
         wrote {DOC}, {JSON}{}",
        records.len(),
        batches.len(),
        started.elapsed().as_secs(),
        if plotted {
            format!(" and {PLOT}")
        } else {
            String::new()
        }
    );
    if measured + batched == 0 {
        return Err(Failure::new("nothing could be measured"));
    }
    Ok(0)
}

/// Writes [`JSON`] and, when some cell has both medians, [`PLOT`] (their
/// file names) into `dir`; whether the plot was written.
fn write_machine_readable(
    dir: &Path,
    records: &[Record],
    batches: &[batch::Record],
    device: &str,
    machine: &[String],
) -> Result<bool> {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| io_failure(format!("cannot write {}", path.display()), e))
    };
    write(JSON, &json::document(records, batches, device, machine))?;
    match plot::svg(records, device) {
        Some(svg) => write(PLOT, &svg).map(|()| true),
        None => Ok(false),
    }
}

/// The host's stages, each until its deadline in `ends`: the UCX pairs,
/// batch_bw over UCX tcp and shared memory, then (given the venv)
/// Mooncake over tcp, its JSON lines to `mooncake_out`. How Mooncake's
/// run ended if not well.
fn ucx_stages(
    perf: &Path,
    device: &str,
    file: &Path,
    ends: &[Instant],
    venv: Option<&mooncake::venv::Venv>,
    mooncake_out: &Path,
) -> Result<Option<String>> {
    const UCX: [Transport; 2] = [Transport::UcxTcp, Transport::UcxSm];
    say!("xtask bench: UCX pairs on the host (UCX_TLS=tcp, then sm,self)");
    sweep(&Sweep {
        perftest: Path::new(UCX_PERFTEST),
        reps: 1..=plan::REPS,
        perf,
        device,
        file,
        transports: &UCX,
        deadline: ends[0],
        limits: HOST_LIMITS,
    })?;
    say!("xtask bench: batch_bw over UCX on the host (tcp, then sm,self; 1 and 2 rails)");
    batch::sweep(perf, device, file, &UCX, ends[1], batch::HOST_LIMITS)?;
    let Some(venv) = venv else {
        return Ok(None);
    };
    let budget = ends[2].saturating_duration_since(Instant::now());
    say!(
        "xtask bench: Mooncake over tcp on the host, {} s left for it",
        budget.as_secs()
    );
    let failure = mooncake::compare::run_tcp(venv, mooncake_out, budget)?;
    if let Some(reason) = &failure {
        say!("xtask bench: Mooncake over tcp: {reason}");
    }
    Ok(failure)
}

/// `cargo xtask bench --compare --ucx-only`: the UCX pairs and batch_bw
/// over UCX alone, on this host, within the command's budget; prints
/// their tables and leaves docs/benchmarks.md as it is (a half run would
/// drop the verbs rows). What iterating on the UCX transport needs:
/// minutes, not a VM.
fn ucx_only_command() -> Result<u8> {
    let started = Instant::now();
    workspace::enter_root()?;
    deps::ensure(deps::ALL)?;
    let perf = cargo_artifacts::build_program(PERF, true)?;
    let scratch = ScratchFile::new("bench-compare")?;
    let file = scratch.path();
    signals::catch_termination();
    // The whole command's budget, not the UCX share of a full run: on a
    // loaded host one repetition alone can take longer than that.
    let end = started + TOTAL_BUDGET - REPORT_MARGIN;
    let ends = stages::deadlines(Instant::now(), &stages::HOST_SHARES[..2], end);
    ucx_stages(&perf, "rxe0", file, &ends, None, file)?;
    let text = scratch.read();
    let records: Vec<Record> = text.lines().filter_map(parse::parse_record).collect();
    let batches: Vec<batch::Record> = text.lines().filter_map(batch::parse_line).collect();
    let dir = workspace::root().join("target").join("xtask");
    write_machine_readable(&dir, &records, &batches, "rxe0", &[])?;
    say!(
        "xtask bench: {JSON} and {PLOT} of this run in {}",
        dir.display()
    );
    let skipped = Anchor::skipped("not run by --ucx-only");
    let anchors = [(Transport::UcxTcp, "Mooncake tcp", &skipped)];
    say!(
        "\n{}\n{}",
        report::tables(&records, "rxe0"),
        transfer::section(&batches, &records, &anchors, "rxe0")
    );
    let measured = records
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Measured { .. }))
        .count();
    say!(
        "xtask bench: {measured} of {} runs measured in {} s; {DOC} left as it is",
        records.len(),
        started.elapsed().as_secs()
    );
    if measured == 0 {
        return Err(Failure::new("nothing could be measured"));
    }
    Ok(0)
}

/// The verbs stages in one VM boot; a VM that fails becomes a note (the
/// UCX half still runs), an interrupted xtask a failure.
fn verbs_in_vm(
    perf: &Path,
    rank: &Path,
    file: &Path,
    budget: Duration,
    mooncake: Option<&Job>,
    notes: &mut Vec<String>,
) -> Result<()> {
    let accel = vm::default_accel_name();
    say!(
        "xtask bench: no RDMA device on this host: verbs pairs, batch_bw and Mooncake on \
         soft-RoCE in one VM ({VM_CPUS} vCPUs under {accel}; cargo xtask vm), {} s for \
         measurements",
        budget.as_secs()
    );
    append_line(
        file,
        &parse::to_info(
            "verbs_place",
            &format!("one qemu VM, {VM_CPUS} vCPUs under {accel}, {VM_MEM} RAM"),
        ),
    )?;
    let mut command = vec![
        cmd::xtask_exe()?,
        "bench-compare-sweep".into(),
        file.as_os_str().to_owned(),
        perf.as_os_str().to_owned(),
        budget.as_secs().to_string().into(),
        "--barrier".into(),
        rank.as_os_str().to_owned(),
    ];
    if let Some(job) = mooncake {
        command.extend([
            "--mooncake".into(),
            job.python.as_os_str().to_owned(),
            job.out.as_os_str().to_owned(),
        ]);
    }
    let mut options = VmOptions::new(command);
    options.timeout = budget + VM_MARGIN;
    options.smp = Some(VM_CPUS);
    options.mem = VM_MEM.into();
    match vm::run(&options) {
        Ok(0) => {}
        Ok(status) => notes.push(format!(
            "the verbs sweep in the VM ended with exit status {status}"
        )),
        Err(failure) => notes.push(format!("the verbs sweep in the VM failed: {failure}")),
    }
    signals::check()
}

/// `xtask bench-compare-sweep FILE PERF BUDGET_SECS [--barrier RANK]
/// [--mooncake PYTHON OUT] [TRANSPORT...]` (hidden): one sweep, appending
/// to FILE; no new measurement starts after BUDGET_SECS. `cargo xtask
/// bench --compare` runs it inside the VM for the verbs stages (the
/// default TRANSPORT, `verbs`), on `$SOFTROCE_DEV` (default rxe0): the
/// pairs, batch_bw, Mooncake over rdma with `--mooncake` (te_bench.py run
/// by PYTHON, its JSON lines to OUT), and with `--barrier` the barrier
/// sweep of `ferrovia-rank` RANK. `ucx-tcp` and `ucx-sm` run the UCX pairs
/// alone.
pub(crate) fn sweep_command(
    file: &Path,
    perf: &Path,
    budget: Duration,
    rank: Option<&Path>,
    mooncake: Option<Job>,
    mut transports: Vec<Transport>,
) -> Result<u8> {
    if transports.is_empty() {
        transports.push(Transport::Verbs);
    }
    let deadline = Instant::now() + budget;
    signals::catch_termination();
    let device = std::env::var("SOFTROCE_DEV").unwrap_or_else(|_| "rxe0".into());
    if transports.contains(&Transport::Verbs) {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        append_line(file, &parse::to_info("guest_kernel", &kernel))?;
        let rxe = Path::new("/sys/module/rdma_rxe").exists();
        append_line(
            file,
            &parse::to_info("rdma_rxe", if rxe { "loaded" } else { "absent" }),
        )?;
    }
    let on_host = transports.iter().all(|t| t.ucx_tls().is_some());
    let sweep_of = Sweep {
        perftest: Path::new(UCX_PERFTEST),
        reps: 1..=plan::REPS,
        perf,
        device: &device,
        file,
        transports: &transports,
        deadline,
        limits: if on_host { HOST_LIMITS } else { VM_LIMITS },
    };
    if transports == [Transport::Verbs] {
        stages::verbs(&sweep_of, rank, mooncake.as_ref())?;
    } else {
        sweep(&sweep_of)?;
    }
    Ok(0)
}

/// One sweep: every cell of `transports`, [`plan::REPS`] times.
struct Sweep<'a> {
    perf: &'a Path,
    /// The UCX reference (`ucx_perftest` from the PATH, or one built for
    /// another UCX release).
    perftest: &'a Path,
    /// The repetitions to run.
    reps: std::ops::RangeInclusive<usize>,
    /// The verbs device.
    device: &'a str,
    file: &'a Path,
    transports: &'a [Transport],
    /// No measurement starts after this.
    deadline: Instant,
    limits: Limits,
}

/// Runs `s`, repetition by repetition (so that a budget cut still leaves
/// every cell measured), both tools of a cell back to back in alternating
/// order; appends one record per run to the file as it goes.
fn sweep(s: &Sweep<'_>) -> Result<()> {
    let mut ports = Ports::new(FIRST_PORT);
    for rep in s.reps.clone() {
        for &transport in s.transports {
            for case in plan::cases(transport) {
                if Instant::now() >= s.deadline {
                    say!(
                        "xtask bench: time budget used up: no more runs after {} of repetition {rep}",
                        transport.key()
                    );
                    return Ok(());
                }
                for tool in Tool::order(rep) {
                    let record = measure(s, &case, tool, rep, &mut ports)?;
                    append_line(s.file, &parse::to_record(&record))?;
                }
            }
        }
    }
    Ok(())
}

/// One run of `tool` in `case`.
fn measure(
    s: &Sweep<'_>,
    case: &Case,
    tool: Tool,
    rep: usize,
    ports: &mut Ports,
) -> Result<Record> {
    let port = ports.take(plan::ports_needed(case, tool))?;
    let inv = plan::invocation(case, tool, s.perf, s.perftest, s.device, port);
    let outcome = match pair::run(&inv, s.limits)? {
        Ok(ran) => {
            let value = parse::value(case, tool, &ran.client_stdout);
            match value {
                Some(value) => Outcome::Measured {
                    value,
                    secs: ran.secs,
                },
                None => Outcome::Failed(format!(
                    "no result for {} B in the client's output{}",
                    case.size,
                    ran.client_stdout
                        .iter()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .map(|l| format!(" (last line: {})", l.trim()))
                        .unwrap_or_default()
                )),
            }
        }
        Err(reason) => Outcome::Failed(reason),
    };
    let name = match tool {
        Tool::Ferrovia => "ferrovia-perf".to_string(),
        Tool::Reference => inv.program.to_string_lossy().into_owned(),
    };
    let what = format!(
        "run {rep} {} {} {}{}",
        report::transport_title(case.transport, s.device),
        case.pair.name,
        report::size_name(case.size),
        if case.qps > 1 {
            format!(" -q {}", case.qps)
        } else {
            String::new()
        }
    );
    match &outcome {
        Outcome::Measured { value, secs } => say!(
            "xtask bench: {what}: {name} {value} {} ({secs:.1} s)",
            case.pair.kind.unit()
        ),
        Outcome::Failed(reason) => say!("xtask bench: {what}: {name} gave nothing: {reason}"),
    }
    Ok(Record {
        transport: case.transport,
        test: case.pair.name.into(),
        size: case.size,
        qps: case.qps,
        tool,
        rep,
        outcome,
    })
}
