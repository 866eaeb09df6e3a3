//! The Mooncake Transfer Engine, the transfer layer's peer anchor, measured
//! on the batch shapes ferrovia-transfer runs: [`venv::prepare`] makes
//! (once) the venv that has it, [`run_on_host`] and [`run_in_vm`] run
//! benches/mooncake/te_bench.py over one transport and return its runs
//! ([`records`]), and [`tables`] sets their medians out as markdown for
//! `bench --compare`. See docs/mooncake.md for what the numbers mean and
//! what the engine needs to give them.
//!
//! `cargo xtask bench-mooncake [tcp|rdma|all]` (hidden) runs it alone.

pub(crate) mod compare;
pub(crate) mod records;
pub(crate) mod venv;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use self::records::{Kind, Measurement, Median};
use self::venv::Venv;
use super::report::size_name;
use crate::failure::Result;
use crate::out::Sink;
use crate::process::{Lines, Watched};
use crate::vm::{self, VmOptions};
use crate::workspace::{self, ScratchFile};
use crate::{rdma_devices, signals};

/// The script, relative to the workspace root.
pub(crate) const SCRIPT: &str = "benches/mooncake/te_bench.py";
/// The batches ferrovia-transfer runs: entries x bytes, one batch each.
pub(crate) const SHAPES: [(usize, usize); 4] = [
    (10_000, 4 << 10),
    (10_000, 64 << 10),
    (1_000, 64 << 10),
    (1_000, 1 << 20),
];
/// sync: one call that returns when the batch has landed; async: the
/// submit call, then the (blocking) status; notify: sync with a
/// notification, timed until the target sees it.
pub(crate) const MODES: [&str; 3] = ["sync", "async", "notify"];

/// Over what the writes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Transport {
    /// The engine's TCP transport (forced, `MC_FORCE_TCP=1`), in a network
    /// namespace that has only `lo`.
    Tcp,
    /// Its RDMA transport on this device.
    Rdma { device: String },
}

impl Transport {
    /// te_bench.py's `--protocol` and `--device`.
    fn args(&self) -> [&str; 4] {
        match self {
            Transport::Tcp => ["--protocol", "tcp", "--device", ""],
            Transport::Rdma { device } => ["--protocol", "rdma", "--device", device],
        }
    }
}

/// What to run, and for how long at most.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) shapes: Vec<(usize, usize)>,
    pub(crate) modes: Vec<&'static str>,
    /// Each mode and shape this often, the latency run too.
    pub(crate) reps: usize,
    /// 8 B sync writes per latency run (0: none).
    pub(crate) lat_iters: usize,
    /// One run, verification included.
    pub(crate) cell_timeout: Duration,
    /// No run starts after this.
    pub(crate) budget: Duration,
    /// Guest RAM for [`run_in_vm`]: 1,000 x 1 MiB needs 1 GiB per side.
    pub(crate) vm_mem: String,
}

impl Options {
    /// Every shape and mode, 3 times: about 2 minutes on the host, 10-15
    /// under TCG (soft-RoCE moves 10-60 MB/s there).
    pub(crate) fn full() -> Options {
        Options {
            shapes: SHAPES.to_vec(),
            modes: MODES.to_vec(),
            reps: 3,
            lat_iters: 1000,
            cell_timeout: Duration::from_secs(300),
            budget: Duration::from_secs(1500),
            vm_mem: "4G".into(),
        }
    }

    /// Small batches once: that the engine runs here at all.
    pub(crate) fn smoke() -> Options {
        Options {
            shapes: vec![(1_000, 4 << 10), (100, 64 << 10)],
            reps: 1,
            lat_iters: 100,
            cell_timeout: Duration::from_secs(120),
            budget: Duration::from_secs(300),
            vm_mem: "2G".into(),
            ..Options::full()
        }
    }

    /// te_bench.py's arguments (after the transport's).
    fn args(&self) -> Vec<String> {
        let shapes: Vec<String> = self
            .shapes
            .iter()
            .map(|(n, s)| format!("{n}x{s}"))
            .collect();
        [
            ("--shapes", shapes.join(",")),
            ("--modes", self.modes.join(",")),
            ("--reps", self.reps.to_string()),
            ("--lat-iters", self.lat_iters.to_string()),
            ("--cell-timeout", self.cell_timeout.as_secs().to_string()),
            ("--budget", self.budget.as_secs().to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v])
        .collect()
    }
}

/// What a run of te_bench.py left.
#[derive(Debug, Clone, Default)]
pub(crate) struct Run {
    /// Its `config` record: `mooncake` (version), `python`, `env` (the MC_
    /// variables), `netns`, `kernel`, `load1`...
    pub(crate) config: BTreeMap<String, String>,
    pub(crate) runs: Vec<Measurement>,
    /// What went wrong around the runs (a VM that failed midway).
    pub(crate) notes: Vec<String>,
    /// The JSON lines themselves.
    pub(crate) text: String,
}

impl Run {
    /// What te_bench.py's JSON lines say.
    pub(crate) fn from_text(text: &str) -> Run {
        let mut notes = Vec::new();
        if records::device_packets(text) == Some(0.0) {
            notes.push(
                "the RDMA device sent no packets during the runs: the engine did not use it".into(),
            );
        }
        Run {
            config: records::config(text),
            runs: text.lines().filter_map(records::measurement).collect(),
            notes,
            text: text.to_string(),
        }
    }
}

/// The command line of te_bench.py over `transport`, its JSON lines going
/// to `out` only (its human lines to stdout): what [`run_on_host`] and
/// [`run_in_vm`] run, for a caller that runs it elsewhere (inside the VM
/// boot of the verbs pairs) and reads `out` with [`Run::from_text`].
pub(crate) fn command_line(
    venv: &Venv,
    transport: &Transport,
    opts: &Options,
    out: &Path,
) -> Vec<OsString> {
    let mut words: Vec<OsString> = vec![
        venv.python.clone().into(),
        workspace::root().join(SCRIPT).into(),
        "--python".into(),
        venv.python.clone().into(),
    ];
    words.extend(transport.args().map(OsString::from));
    words.extend(opts.args().into_iter().map(OsString::from));
    words.extend(["--out".into(), out.into(), "--quiet".into()]);
    words
}

/// Runs te_bench.py on this machine over `transport`: its runs, or why
/// nothing ran (the inner `Err`; the outer one only comes from an
/// interrupted xtask). Over tcp the script makes its network namespace
/// itself, which needs root.
pub(crate) fn run_on_host(
    venv: &Venv,
    transport: &Transport,
    opts: &Options,
) -> Result<std::result::Result<Run, String>> {
    workspace::enter_root()?;
    let scratch = ScratchFile::new("mooncake")?;
    let failure = run_into(venv, transport, opts, scratch.path())?;
    let run = Run::from_text(&scratch.read());
    if run.runs.is_empty() {
        return Ok(Err(
            failure.unwrap_or_else(|| "te_bench.py gave no runs".into())
        ));
    }
    Ok(Ok(run))
}

/// Runs te_bench.py here over `transport` (in the workspace root), its
/// JSON lines appended to `out`, its human lines shown as they come;
/// `Some(reason)` if it failed or gave up (what it wrote to `out` before
/// still counts). The outer `Err` only comes from an interrupted xtask.
pub(crate) fn run_into(
    venv: &Venv,
    transport: &Transport,
    opts: &Options,
    out: &Path,
) -> Result<Option<String>> {
    let words = command_line(venv, transport, opts, out);
    let mut cmd = Command::new(&words[0]);
    cmd.args(&words[1..])
        .current_dir(workspace::root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let stdout = Lines::shown(Sink::Stdout, String::new(), false);
    let stderr = Lines::shown(Sink::Stderr, "te_bench.py: ".into(), true);
    let mut child = match Watched::spawn(&mut cmd, stdout, stderr) {
        Ok(child) => child,
        Err(e) => return Ok(Some(format!("cannot start te_bench.py: {e}"))),
    };
    // The script keeps to its budget; a run under way may overrun it by
    // its own deadline.
    let status = child.wait_for(opts.budget + opts.cell_timeout + Duration::from_secs(60))?;
    signals::check()?;
    let done = child.finish();
    let last = done.stderr.iter().rev().find(|l| !l.trim().is_empty());
    Ok(match (status, last) {
        (None, _) => Some("te_bench.py did not finish in time (killed)".into()),
        (Some(s), _) if s.success() => None,
        (Some(s), Some(l)) => Some(format!(
            "te_bench.py ended with {s}: {}",
            l.trim().chars().take(200).collect::<String>()
        )),
        (Some(s), None) => Some(format!("te_bench.py ended with {s}")),
    })
}

/// Runs te_bench.py over RDMA on soft-RoCE `rxe0` in one VM boot (TCG, 2
/// vCPUs, `opts.vm_mem`); the guest writes the JSON lines into a scratch
/// file of the shared workspace, read once the VM is gone.
pub(crate) fn run_in_vm(venv: &Venv, opts: &Options) -> Result<std::result::Result<Run, String>> {
    workspace::enter_root()?;
    let scratch = ScratchFile::new("mooncake")?;
    let transport = Transport::Rdma {
        device: "rxe0".into(),
    };
    let words = command_line(venv, &transport, opts, scratch.path());
    let mut options = VmOptions::new(words);
    options.timeout = opts.budget + opts.cell_timeout + Duration::from_secs(180);
    options.smp = Some(2);
    options.mem = opts.vm_mem.clone();
    let status = vm::run(&options);
    signals::check()?;
    // What the guest wrote before a VM failure still counts.
    let mut run = Run::from_text(&scratch.read());
    match status {
        Ok(0) => {}
        Ok(s) => run
            .notes
            .push(format!("te_bench.py in the VM ended with exit status {s}")),
        Err(failure) => run.notes.push(format!("the VM failed: {failure}")),
    }
    if run.runs.is_empty() {
        return Ok(Err(format!(
            "te_bench.py gave no runs in the VM: {}",
            run.notes.join("; ")
        )));
    }
    Ok(Ok(run))
}

/// A number with about three significant digits, `—` for none.
fn number(v: Option<f64>) -> String {
    match v {
        None => "—".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) if v.abs() >= 1.0 => format!("{v:.2}"),
        Some(v) => format!("{v:.3}"),
    }
}

/// The medians of `medians` as two markdown tables, batches and latency,
/// each run that gave no number explained under them; `title` names the
/// transport in each row ("Mooncake tcp").
pub(crate) fn tables(title: &str, medians: &[Median]) -> String {
    let mut out = String::new();
    let mut notes = Vec::new();
    // The submit call is the whole call in sync and notify: there the
    // column is the batch's time per entry.
    out.push_str(
        "Medians. MB = 2^20 bytes. µs/entry: time inside the submit call / N (async: the \
         submission alone; sync, notify: the one call, transfer included). notified: from the \
         call until the target saw the batch's notification.\n\n\
         | transport | mode | batch | MB/s | entries/s | µs/entry | notified (ms) | runs |\n\
         |---|---|---|---:|---:|---:|---:|---:|\n",
    );
    for m in medians.iter().filter(|m| m.kind == Kind::Batch) {
        let n = &m.numbers;
        let _ = writeln!(
            out,
            "| {title} | {} | {} x {} | {} | {} | {} | {} | {}/{} |",
            m.mode,
            m.entries,
            size_name(m.size),
            number(n.mb_per_s),
            number(n.entries_per_s),
            number(m.per_entry_us()),
            number(n.notified_secs.map(|s| s * 1e3)),
            m.runs,
            m.attempted
        );
        if let Some(why) = &m.failure {
            notes.push(format!(
                "{title} {} {} x {}: {why}",
                m.mode,
                m.entries,
                size_name(m.size)
            ));
        }
    }
    let latency: Vec<&Median> = medians.iter().filter(|m| m.kind == Kind::Latency).collect();
    if !latency.is_empty() {
        out.push_str(
            "\n| transport | single write | median µs | p99 µs | runs |\n|---|---|---:|---:|---:|\n",
        );
    }
    for m in latency {
        let _ = writeln!(
            out,
            "| {title} | {} sync | {} | {} | {}/{} |",
            size_name(m.size),
            number(m.numbers.median_us),
            number(m.numbers.p99_us),
            m.runs,
            m.attempted
        );
        if let Some(why) = &m.failure {
            notes.push(format!("{title} {} write: {why}", size_name(m.size)));
        }
    }
    for note in notes {
        let _ = write!(out, "\n- {note}");
    }
    out
}

/// `cargo xtask bench-mooncake [tcp|rdma|all] [--smoke]` (hidden): the
/// venv, then te_bench.py over tcp on the host and over rdma (on the
/// host's RDMA device, else on soft-RoCE in one VM boot); prints the
/// tables. Skips with a reason, exit status 0, where Mooncake cannot be
/// installed.
pub(crate) fn command(which: &str, smoke: bool) -> Result<u8> {
    workspace::enter_root()?;
    signals::catch_termination();
    let opts = if smoke {
        Options::smoke()
    } else {
        Options::full()
    };
    let venv = match venv::prepare()? {
        Ok(venv) => venv,
        Err(reason) => {
            say!("xtask bench: no Mooncake rows: {reason}");
            return Ok(0);
        }
    };
    let mut out = Vec::new();
    if which != "rdma" {
        out.push((
            "tcp",
            "Mooncake tcp",
            run_on_host(&venv, &Transport::Tcp, &opts)?,
        ));
    }
    if which != "tcp" {
        let run = match rdma_devices::host_devices().into_iter().next() {
            Some(device) => run_on_host(&venv, &Transport::Rdma { device }, &opts)?,
            None => run_in_vm(&venv, &opts)?,
        };
        out.push(("rdma", "Mooncake rdma", run));
    }
    let mut any = false;
    for (key, title, run) in out {
        match run {
            Ok(run) => {
                any = true;
                // Every run's numbers, for a closer look than the medians.
                let raw = workspace::root().join(format!("target/xtask/mooncake-{key}.jsonl"));
                if std::fs::write(&raw, &run.text).is_ok() {
                    say!(
                        "\nxtask bench: the runs' JSON lines are in {}",
                        raw.display()
                    );
                }
                let config: Vec<String> = ["mooncake", "python", "env", "netns", "kernel"]
                    .iter()
                    .filter_map(|k| run.config.get(*k).map(|v| format!("{k}: {v}")))
                    .collect();
                say!("\n{title} ({})\n", config.join("; "));
                say!("{}", tables(title, &records::medians(&run.runs)));
                for note in &run.notes {
                    say!("- {note}");
                }
            }
            Err(reason) => say!("\n{title}: no runs: {reason}"),
        }
    }
    Ok(if any { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_names_transport_and_shapes() {
        let venv = Venv {
            python: "/v/bin/python".into(),
        };
        let words: Vec<String> =
            command_line(&venv, &Transport::Tcp, &Options::full(), "/o".as_ref())
                .iter()
                .map(|w| w.to_string_lossy().into_owned())
                .collect();
        assert_eq!(words[0], "/v/bin/python");
        assert!(words[1].ends_with(SCRIPT));
        let after = |flag: &str| {
            let i = words.iter().position(|w| w == flag).unwrap();
            words[i + 1].as_str()
        };
        assert_eq!(after("--python"), "/v/bin/python");
        assert_eq!(after("--protocol"), "tcp");
        assert_eq!(
            after("--shapes"),
            "10000x4096,10000x65536,1000x65536,1000x1048576"
        );
        assert_eq!(after("--modes"), "sync,async,notify");
        assert_eq!(after("--reps"), "3");
        assert_eq!(after("--out"), "/o");
        assert_eq!(words.last().map(String::as_str), Some("--quiet"));
        let rdma = Transport::Rdma {
            device: "rxe0".into(),
        };
        assert_eq!(rdma.args(), ["--protocol", "rdma", "--device", "rxe0"]);
    }

    #[test]
    fn tables_show_medians_and_say_why_a_cell_is_empty() {
        let text = r#"{"te_bench": 1, "protocol": "rdma", "kind": "batch", "mode": "async", "entries": 1000, "size": 4096, "rep": 1, "ok": true, "secs": 0.08, "submit_us_per_entry": 6.8, "call_us_per_entry": 6.8, "mb_per_s": 48.8, "entries_per_s": 12500.0}
{"te_bench": 1, "protocol": "rdma", "kind": "batch", "mode": "sync", "entries": 1000, "size": 1048576, "rep": 1, "ok": false, "reason": "needs 2000 MiB (a buffer per side), 1850 MiB available"}
{"te_bench": 1, "protocol": "rdma", "kind": "latency", "mode": "sync_write", "entries": 1, "size": 8, "rep": 1, "ok": true, "median_us": 52.6, "p99_us": 300.0}"#;
        let run = Run::from_text(text);
        let table = tables("Mooncake rdma", &records::medians(&run.runs));
        assert!(
            table.contains(
                "| Mooncake rdma | async | 1000 x 4 KiB | 48.8 | 12500 | 6.80 | — | 1/1 |"
            ),
            "{table}"
        );
        assert!(table.contains("| Mooncake rdma | sync | 1000 x 1 MiB | — | — | — | — | 0/1 |"));
        assert!(table.contains("| Mooncake rdma | 8 B sync | 52.6 | 300 | 1/1 |"));
        assert!(table.ends_with("- Mooncake rdma sync 1000 x 1 MiB: needs 2000 MiB (a buffer per side), 1850 MiB available"));
    }
}
