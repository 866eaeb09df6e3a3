//! `cargo xtask bench --compare`: `ferrovia-perf` next to the reference
//! tools, in one command. Builds `ferrovia-perf` optimized; runs every
//! verbs test pair (ferrovia-perf and perftest, alternating, several
//! times) on soft-RoCE `rxe0` in one VM boot (or on the host's RDMA
//! device), then every UCX pair (ferrovia-perf over UCX and
//! `ucx_perftest`) on the host with `UCX_TLS=tcp` and `UCX_TLS=sm,self`;
//! prints one table of medians and ratios plus the queue-pair scaling row,
//! and writes them to docs/benchmarks.md with a description of the machine.
//!
//! Inside the VM xtask runs itself (hidden `bench-compare-sweep FILE PERF
//! BUDGET_SECS --barrier RANK`): the guest appends one record per run to
//! FILE in the shared workspace, which the host reads once the VM is gone;
//! the host's UCX runs append to the same file. What is left of the verbs
//! budget goes to the barrier sweep of `cargo xtask bench barrier`, whose
//! tables follow the others. A run that fails or times out becomes
//! a `—` cell with its reason under the table; every stage has a deadline,
//! and the whole command keeps to [`TOTAL_BUDGET`] by starting no new
//! measurement once its share of the budget is spent. `--ucx-only` runs
//! the UCX pairs alone and only prints their table.

mod doc;
pub(crate) mod mooncake;
mod pair;
mod pairs;
mod parse;
mod plan;
mod report;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use self::pair::{Limits, Ports};
use self::parse::{Outcome, Record};
pub(crate) use self::plan::Transport;
use self::plan::{Case, Tool};
use crate::cargo_artifacts::{self, Program, RANK};
use crate::failure::{Failure, Result, io_failure};
use crate::vm::{self, VmOptions};
use crate::workspace::{ScratchFile, append_line};
use crate::{bench, cmd, deps, rdma_devices, signals, workspace};

/// The benchmark program.
const PERF: Program = Program::Bin {
    package: "ferrovia-benches",
    name: "ferrovia-perf",
};
/// The barrier sweep runs after the verbs pairs only if this much of the
/// verbs budget is left (it takes 70 s or more under TCG).
const BARRIER_MIN: Duration = Duration::from_secs(90);
/// The whole command, build included: no new measurement starts after
/// this (minus the time the report needs).
const TOTAL_BUDGET: Duration = Duration::from_secs(19 * 60);
/// At most this long for starting verbs measurements: a full sweep of
/// [`plan::REPS`] repetitions takes 5-8 min under TCG, what is left goes
/// to the barrier sweep.
const VERBS_BUDGET: Duration = Duration::from_secs(660);
/// The UCX measurements' share of the budget, kept free for them (a full
/// sweep takes about 2 min).
const UCX_BUDGET: Duration = Duration::from_secs(240);
/// Time for the VM boot and the last run after the verbs budget (the
/// barrier sweep's last run may overrun it by 30 s).
const VM_MARGIN: Duration = Duration::from_secs(150);
/// Kept for writing the report.
const REPORT_MARGIN: Duration = Duration::from_secs(15);
/// vCPUs of the VM (the `cargo xtask vm` default for one guest).
const VM_CPUS: u32 = 2;
/// Guest RAM: perftest with 1 MiB messages needs room.
const VM_MEM: &str = "2G";
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

    let verbs_budget = VERBS_BUDGET.min(
        budget_end
            .saturating_duration_since(Instant::now())
            .saturating_sub(UCX_BUDGET + VM_MARGIN),
    );
    let device = match rdma_devices::host_devices().into_iter().next() {
        Some(device) => {
            say!("xtask bench: host RDMA device {device}: verbs pairs run here");
            signals::catch_termination();
            let place = format!("this host, device {device}");
            append_line(file, &parse::to_info("verbs_place", &place))?;
            let sweep = Sweep {
                perf: &perf,
                device: &device,
                file,
                transports: &[Transport::Verbs],
                deadline: Instant::now() + verbs_budget,
                limits: HOST_LIMITS,
            };
            verbs_then_barrier(&sweep, Some(&rank))?;
            device
        }
        None => {
            verbs_in_vm(&perf, &rank, file, verbs_budget, &mut notes)?;
            "rxe0".to_string()
        }
    };

    signals::catch_termination();
    let ucx_deadline = budget_end.min(Instant::now() + UCX_BUDGET);
    say!("xtask bench: UCX pairs on the host (UCX_TLS=tcp, then sm,self)");
    sweep(&Sweep {
        perf: &perf,
        device: &device,
        file,
        transports: &[Transport::UcxTcp, Transport::UcxSm],
        deadline: ucx_deadline,
        limits: HOST_LIMITS,
    })?;

    let text = scratch.read();
    let records: Vec<Record> = text.lines().filter_map(parse::parse_record).collect();
    let info: BTreeMap<String, String> = text.lines().filter_map(parse::parse_info).collect();
    let mut tables = report::tables(&records, &device);
    let barrier_place = info.get("verbs_place").map_or("", String::as_str);
    if let Some(barrier) = bench::tables_from_records(&text, barrier_place) {
        tables.push_str(&format!(
            "\n#{barrier}\nThe sweep of `cargo xtask bench barrier` (ferrovia-rank, not \
             ferrovia-perf), run in the same boot after the verbs pairs with what was left of \
             their time budget.\n"
        ));
    }
    let machine = doc::machine(&info, &PERF.cargo_line(true), started.elapsed());
    say!("\n{tables}");
    for note in &notes {
        say!("xtask bench: {note}");
    }
    let doc = doc::document(&machine, &tables, &notes);
    let doc_path = workspace::root().join(DOC);
    std::fs::write(&doc_path, doc)
        .map_err(|e| io_failure(format!("cannot write {}", doc_path.display()), e))?;
    let measured = records
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Measured { .. }))
        .count();
    say!(
        "xtask bench: {measured} of {} runs measured in {} s; wrote {DOC}",
        records.len(),
        started.elapsed().as_secs()
    );
    if measured == 0 {
        return Err(Failure::new("nothing could be measured"));
    }
    Ok(0)
}

/// `cargo xtask bench --compare --ucx-only`: the UCX pairs alone, on this
/// host, within the command's budget; prints the table of ratios and
/// leaves docs/benchmarks.md as it is (a half run would drop the verbs
/// rows). What iterating on the UCX transport needs: minutes, not a VM.
fn ucx_only_command() -> Result<u8> {
    let started = Instant::now();
    workspace::enter_root()?;
    deps::ensure(deps::ALL)?;
    let perf = cargo_artifacts::build_program(PERF, true)?;
    let scratch = ScratchFile::new("bench-compare")?;
    let file = scratch.path();
    signals::catch_termination();
    say!("xtask bench: UCX pairs only, on the host (UCX_TLS=tcp, then sm,self)");
    sweep(&Sweep {
        perf: &perf,
        device: "rxe0",
        file,
        transports: &[Transport::UcxTcp, Transport::UcxSm],
        // The whole command's budget, not the UCX share of a full run: on
        // a loaded host one repetition alone can take longer than that.
        deadline: started + TOTAL_BUDGET - REPORT_MARGIN,
        limits: HOST_LIMITS,
    })?;
    let text = scratch.read();
    let records: Vec<Record> = text.lines().filter_map(parse::parse_record).collect();
    say!("\n{}", report::tables(&records, "rxe0"));
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

/// The verbs pairs in one VM boot; a VM that fails becomes a note (the
/// UCX half still runs), an interrupted xtask a failure.
fn verbs_in_vm(
    perf: &Path,
    rank: &Path,
    file: &Path,
    budget: Duration,
    notes: &mut Vec<String>,
) -> Result<()> {
    let accel = vm::default_accel_name();
    say!(
        "xtask bench: no RDMA device on this host: verbs pairs on soft-RoCE in one VM \
         ({VM_CPUS} vCPUs under {accel}; cargo xtask vm), {} s for measurements",
        budget.as_secs()
    );
    append_line(
        file,
        &parse::to_info(
            "verbs_place",
            &format!("one qemu VM, {VM_CPUS} vCPUs under {accel}, {VM_MEM} RAM"),
        ),
    )?;
    let command = vec![
        cmd::xtask_exe()?,
        "bench-compare-sweep".into(),
        file.as_os_str().to_owned(),
        perf.as_os_str().to_owned(),
        budget.as_secs().to_string().into(),
        "--barrier".into(),
        rank.as_os_str().to_owned(),
    ];
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
/// [TRANSPORT...]` (hidden): one sweep, appending to FILE; no new
/// measurement starts after BUDGET_SECS. `cargo xtask bench --compare`
/// runs it inside the VM for the verbs pairs (the default TRANSPORT,
/// `verbs`), on `$SOFTROCE_DEV` (default rxe0), with `--barrier`: then the
/// barrier sweep of `ferrovia-rank` RANK gets what is left of the budget.
/// `ucx-tcp` and `ucx-sm` run the UCX pairs alone.
pub(crate) fn sweep_command(
    file: &Path,
    perf: &Path,
    budget: Duration,
    rank: Option<&Path>,
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
    let sweep = Sweep {
        perf,
        device: &device,
        file,
        transports: &transports,
        deadline,
        limits: if on_host { HOST_LIMITS } else { VM_LIMITS },
    };
    verbs_then_barrier(&sweep, rank)?;
    Ok(0)
}

/// Runs `s`, then, given `ferrovia-rank`, the barrier sweep if at least
/// [`BARRIER_MIN`] of the budget is left.
fn verbs_then_barrier(s: &Sweep<'_>, rank: Option<&Path>) -> Result<()> {
    sweep(s)?;
    let Some(rank) = rank else {
        return Ok(());
    };
    let left = s.deadline.saturating_duration_since(Instant::now());
    if left < BARRIER_MIN {
        say!(
            "xtask bench: {} s of the budget left: no barrier sweep (it needs {} s)",
            left.as_secs(),
            BARRIER_MIN.as_secs()
        );
        return Ok(());
    }
    say!(
        "xtask bench: the barrier sweep of cargo xtask bench barrier, {} s left",
        left.as_secs()
    );
    bench::sweep_until(rank, s.file, Some(s.deadline))?;
    Ok(())
}

/// One sweep: every cell of `transports`, [`plan::REPS`] times.
struct Sweep<'a> {
    perf: &'a Path,
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
    for rep in 1..=plan::REPS {
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
    let inv = plan::invocation(case, tool, s.perf, s.device, port);
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
