//! docs/benchmarks.md: the machine and the software a comparison ran on,
//! how to reproduce it, what its numbers mean, and its tables.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::mooncake::compare::Anchor;
use super::mooncake::venv::{DIST, VERSION, Venv};

/// The first line `program args...` writes to stdout, trimmed, whatever
/// its exit status (`ib_write_bw --version` exits 1).
fn first_line(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(String::from)
}

/// The machine and the software, as bullet points.
/// `perf` says how ferrovia-perf was built: the document names no path of
/// this machine.
pub(crate) fn machine(info: &BTreeMap<String, String>, perf: &str, took: Duration) -> Vec<String> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpus = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, m)| m.trim())
        })
        .unwrap_or("unknown CPU");
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let os = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("PRETTY_NAME=")
                    .map(|v| v.trim_matches('"').to_string())
            })
        })
        .unwrap_or_else(|| "unknown OS".into());
    let date =
        first_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_else(|| "unknown date".into());
    let ucx = first_line("ucx_info", &["-v"])
        .map(|l| l.trim_start_matches('#').trim().replace("Version ", ""))
        .unwrap_or_else(|| "unknown version".into());
    let perftest = first_line("ib_write_bw", &["--version"]).unwrap_or_else(|| "unknown".into());
    let commit = first_line("git", &["rev-parse", "--short", "HEAD"]);
    let dirty = first_line("git", &["status", "--porcelain", "--untracked-files=no"]).is_some();
    let mut lines = vec![
        format!(
            "Date: {date}; the whole run took {} min {} s.",
            took.as_secs() / 60,
            took.as_secs() % 60
        ),
        format!(
            "Host: {model}, {cpus} CPU(s) (/proc/cpuinfo), {os}, kernel {}.",
            kernel.trim()
        ),
    ];
    if let Some(place) = info.get("verbs_place") {
        let mut line = format!("Verbs: {place}");
        if let Some(k) = info.get("guest_kernel") {
            line.push_str(&format!(", guest kernel {k}"));
        }
        match info.get("rdma_rxe").map(String::as_str) {
            Some("loaded") => {
                line.push_str(", soft-RoCE rxe0 (its rdma_rxe module) on a dummy netdev")
            }
            Some(other) => line.push_str(&format!(", rdma_rxe {other}")),
            None => {}
        }
        line.push_str(&format!(
            "; perftest {}.",
            perftest.trim_start_matches("Version:").trim()
        ));
        lines.push(line);
    }
    lines.push(format!(
        "UCX: {ucx} (`ucx_info -v`), ucx_perftest and ferrovia-perf (`FERROVIA_BACKEND=ucx`) \
         natively on the host. Both use peer error handling over tcp (ucx_perftest `-e`) and \
         none over shared memory, which has none in UCX 1.13."
    ));
    lines.push(format!(
        "ferrovia-perf: release build (`{perf}`){}.",
        commit.map_or_else(String::new, |c| format!(
            " of commit {c}{}",
            if dirty {
                " plus uncommitted changes"
            } else {
                ""
            }
        ))
    ));
    lines.push(
        "Server and client of every run are two processes on one machine, the client \
         connecting to 127.0.0.1. On the host (the UCX rows and batch_bw over UCX), both \
         tools' server runs on CPU 0 and client on CPU 1 (`sched_setaffinity`): unpinned on \
         two cores, the busy-polling threads and ferrovia's progress threads take turns and \
         a pair stalls whenever one side is descheduled."
            .into(),
    );
    lines
}

/// The Mooncake Transfer Engine's line of the machine: its wheel and
/// Python (te_bench.py's `config` record), or why it did not run.
pub(crate) fn mooncake_line(venv: &Result<Venv, String>, tcp: &Anchor, rdma: &Anchor) -> String {
    if let Err(reason) = venv {
        return format!("Mooncake Transfer Engine: not measured ({reason}).");
    }
    let config = [&tcp.config, &rdma.config]
        .into_iter()
        .find(|c| c.contains_key("mooncake"));
    let python = config
        .and_then(|c| c.get("python"))
        .map_or_else(String::new, |p| format!(", Python {p}"));
    format!(
        "Mooncake Transfer Engine: {DIST} {}{python} from PyPI in a venv outside the \
         repository, driven by benches/mooncake/te_bench.py (async mode); over tcp on the host \
         in a network namespace with only lo, over rdma in the VM boot of the verbs pairs.",
        config
            .and_then(|c| c.get("mooncake"))
            .map_or(VERSION, String::as_str)
    )
}

/// docs/benchmarks.md; `plotted`: the ratios' plot was written beside it.
pub(crate) fn document(
    machine: &[String],
    tables: &str,
    notes: &[String],
    plotted: bool,
) -> String {
    let mut doc = format!(
        "# Benchmarks: ferrovia next to perftest, ucx_perftest and the Mooncake Transfer \
         Engine\n\n\
         Generated by `cargo xtask bench --compare` (xtask/src/bench_compare); rerunning it \
         rewrites this file but its last section, Design measurements, which is written by \
         hand.\n\n\
         How to reproduce: `cargo xtask bench --compare`. One VM boot for the verbs pairs, \
         then `ferrovia-perf batch_bw` on soft-RoCE and Mooncake over rdma, then the barrier \
         sweep; then, on the host, the UCX pairs, batch_bw over UCX and Mooncake over tcp. \
         About 25 minutes on the machine below; the command keeps a {}-minute budget (no new \
         measurement after it, the stages sharing it), so it ends within about 50 minutes. \
         `FERROVIA_MOONCAKE=skip` (or a machine without PyPI) leaves Mooncake's cells empty \
         with the reason.\n\n\
         ## Machine\n\n",
        super::TOTAL_BUDGET.as_secs() / 60
    );
    for line in machine {
        doc.push_str(&format!("- {line}\n"));
    }
    doc.push_str(
        "\nThe verbs rows ran on soft-RoCE in a qemu VM under TCG (software emulation): \
         everything there is 10-50x slower than native and moves with the host's load, so \
         those numbers are only meaningful as ratios measured in the same boot \
         (ferrovia-perf to perftest, batch_bw to Mooncake), as here, never as absolute \
         numbers or across runs. The UCX rows \
         ran natively, server and client sharing the host's CPUs.\n\n## Results\n\n",
    );
    if plotted {
        doc.push_str(&format!(
            "![ferrovia against its reference, per cell]({})\n\n\
             The ratios of the pair tables below, a row per cell: right of 1, ferrovia is \
             faster (for latency the plot shows the inverse of the table's ratio).\n\n",
            super::PLOT
        ));
    }
    doc.push_str(&format!(
        "Every number of these tables, each run's too, for programs: [{0}]({0}).\n\n",
        super::JSON
    ));
    doc.push_str(tables);
    if !notes.is_empty() {
        doc.push_str("\nNotes on the run:\n\n");
        for note in notes {
            doc.push_str(&format!("- {note}\n"));
        }
    }
    doc
}

/// The heading of the document's last section, written by hand: the
/// measurements behind design choices, which docs/ARCHITECTURE.md links
/// to. A rerun keeps it.
const DESIGN: &str = "\n## Design measurements";

/// The new document `doc` followed by the Design measurements section of
/// the `old` one, if it has one.
pub(crate) fn keep_design_measurements(mut doc: String, old: &str) -> String {
    if let Some(i) = old.find(DESIGN) {
        if !doc.ends_with('\n') {
            doc.push('\n');
        }
        doc.push_str(&old[i..]);
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_says_how_to_reproduce_and_what_tcg_means() {
        let doc = document(
            &["Host: a CPU".into()],
            "| table |\n",
            &["the VM ended with exit status 124".into()],
            true,
        );
        assert!(doc.starts_with("# Benchmarks"), "{doc}");
        assert!(
            doc.contains("How to reproduce: `cargo xtask bench --compare`"),
            "{doc}"
        );
        assert!(doc.contains("## Machine\n\n- Host: a CPU\n"), "{doc}");
        assert!(doc.contains("only meaningful as ratios"), "{doc}");
        assert!(
            doc.contains(
                "## Results\n\n![ferrovia against its reference, per cell](benchmarks-ratios.svg)"
            ),
            "{doc}"
        );
        assert!(
            doc.contains("for programs: [benchmarks.json](benchmarks.json).\n\n| table |\n"),
            "{doc}"
        );
        let unplotted = document(&[], "| table |\n", &[], false);
        assert!(!unplotted.contains(".svg"), "{unplotted}");
        assert!(
            doc.ends_with("- the VM ended with exit status 124\n"),
            "{doc}"
        );
    }

    #[test]
    fn a_rerun_keeps_the_design_measurements() {
        let old = "# Benchmarks\n\n## Results\n\nold\n\n## Design measurements\n\n- 41 µs\n";
        let doc = keep_design_measurements("# Benchmarks\n\n## Results\n\nnew\n".into(), old);
        assert_eq!(
            doc,
            "# Benchmarks\n\n## Results\n\nnew\n\n## Design measurements\n\n- 41 µs\n"
        );
        assert_eq!(keep_design_measurements("new\n".into(), "old\n"), "new\n");
    }

    #[test]
    fn the_machine_is_described() {
        let info: BTreeMap<String, String> = [
            ("verbs_place", "one qemu VM, 2 vCPUs under TCG, 2G RAM"),
            ("guest_kernel", "6.1.0-56-amd64"),
            ("rdma_rxe", "loaded"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let lines = machine(
            &info,
            "cargo build --release -p p --bin b",
            Duration::from_secs(125),
        );
        assert!(lines[0].ends_with("took 2 min 5 s."), "{lines:?}");
        assert!(lines[1].starts_with("Host: "), "{lines:?}");
        assert!(
            lines[2].starts_with("Verbs: one qemu VM, 2 vCPUs under TCG, 2G RAM, guest kernel 6.1.0-56-amd64, soft-RoCE rxe0"),
            "{lines:?}"
        );
        assert!(lines.iter().any(|l| l.starts_with("UCX: ")), "{lines:?}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("ferrovia-perf: release build (`cargo build")),
            "{lines:?}"
        );
    }
}
