//! `cargo xtask bench ucx-versions`: the UCX pairs of `bench --compare`
//! over two UCX releases in one run. The system UCX (Debian 12: 1.13.1)
//! with ferrovia-perf built as usual and the system's `ucx_perftest`;
//! UCX 1.22.0 with ferrovia-perf built with `ucx-vendored` (the `ucx-rs`
//! crate builds that release and links it statically) and a
//! `ucx_perftest` built here from the same tarball (cached under
//! `target/ucx-1.22`). Repetitions alternate between the releases, and
//! inside one the two tools alternate, so slow phases of the host hit
//! both. Prints one side-by-side table and writes it to
//! [`DOC`].

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use super::parse::{self, Outcome, Record};
use super::plan::{self, Case, Kind, Tool, Transport};
use super::{HOST_LIMITS, PERF, Sweep, report};
use crate::cargo_artifacts;
use crate::failure::{Failure, Result, io_failure};
use crate::workspace::{self, ScratchFile};
use crate::{cmd, deps, signals};

/// Where the report goes, relative to the workspace root.
pub(crate) const DOC: &str = "docs/benchmarks-ucx-versions.md";
/// Repetitions per release, tool and cell (the goals: medians of
/// at least five alternating runs).
const REPS: usize = 5;
/// The feature of ferrovia-benches that links UCX 1.22 through ucx-rs.
const FEATURE: &str = "ferrovia-benches/ucx-vendored";
/// Its own target directory: the two builds differ in every crate above
/// ferrovia-ucx, and one directory would rebuild them at each switch.
const VENDORED_TARGET: &str = "target/ucx-vendored";
/// The vendored release and the tarball inside ucx-rs.
const VERSION: &str = "1.22.0";
/// Where ucx_perftest 1.22 is built and installed.
const PERFTEST_DIR: &str = "target/ucx-1.22";
/// The configuration of ucx-rs's own build (optimized, no debug checks,
/// no accelerators) with the shared libraries the tools link against.
const CONFIGURE: &[&str] = &[
    "--enable-optimizations",
    "--disable-debug",
    "--disable-assertions",
    "--disable-params-check",
    "--disable-doxygen-doc",
    "--disable-static",
    "--without-cuda",
    "--without-rocm",
    "--without-java",
    "--without-go",
    "--without-fuse3",
    "--without-xpmem",
    "--without-knem",
    "--without-gdrcopy",
    "--without-verbs",
    "--without-rdmacm",
    "--without-efa",
];

/// One UCX release of the run: its name and its two programs.
struct Release {
    name: String,
    perf: PathBuf,
    perftest: PathBuf,
}

/// `cargo xtask bench ucx-versions`.
pub(crate) fn command() -> Result<u8> {
    let started = Instant::now();
    workspace::enter_root()?;
    deps::ensure(deps::ALL)?;
    let system = Release {
        name: format!("system UCX {}", system_version()?),
        perf: cargo_artifacts::build_program(PERF, true)?,
        perftest: PathBuf::from("ucx_perftest"),
    };
    let vendored = Release {
        name: format!("UCX {VERSION} (ucx-rs)"),
        perf: build_vendored_perf()?,
        perftest: build_perftest()?,
    };
    let releases = [system, vendored];
    let files = [
        ScratchFile::new("bench-ucx-system")?,
        ScratchFile::new("bench-ucx-vendored")?,
    ];
    signals::catch_termination();
    const UCX: [Transport; 2] = [Transport::UcxTcp, Transport::UcxSm];
    // No deadline of its own: five repetitions of the UCX pairs over two
    // releases take about ten minutes; every run has its own limits.
    let deadline = Instant::now() + std::time::Duration::from_secs(3600);
    for rep in 1..=REPS {
        for (release, file) in releases.iter().zip(&files) {
            say!(
                "xtask bench: repetition {rep} of {REPS} over {}",
                release.name
            );
            super::sweep(&Sweep {
                perf: &release.perf,
                perftest: &release.perftest,
                device: "rxe0",
                file: file.path(),
                transports: &UCX,
                deadline,
                limits: HOST_LIMITS,
                reps: rep..=rep,
            })?;
        }
    }
    let records: Vec<Vec<Record>> = files
        .iter()
        .map(|f| f.read().lines().filter_map(parse::parse_record).collect())
        .collect();
    let table = side_by_side(&releases, &records);
    say!("\n{table}");
    let doc = document(&table, started.elapsed().as_secs());
    let path = workspace::root().join(DOC);
    std::fs::write(&path, doc)
        .map_err(|e| io_failure(format!("cannot write {}", path.display()), e))?;
    let measured = records
        .iter()
        .flatten()
        .filter(|r| matches!(r.outcome, Outcome::Measured { .. }))
        .count();
    say!(
        "xtask bench: {measured} of {} runs measured in {} s; wrote {DOC}",
        records.iter().map(Vec::len).sum::<usize>(),
        started.elapsed().as_secs()
    );
    if measured == 0 {
        return Err(Failure::new("nothing could be measured"));
    }
    Ok(0)
}

/// The system UCX's version, from `ucx_info -v`.
fn system_version() -> Result<String> {
    let out = Command::new("ucx_info")
        .arg("-v")
        .output()
        .map_err(|e| io_failure("cannot run ucx_info -v", e))?;
    Ok(version_of(&String::from_utf8_lossy(&out.stdout)))
}

/// The version in `ucx_info -v`'s text: `# Library version: X` since UCX
/// 1.14, `# Version X` before (Debian 12's 1.13.1).
fn version_of(text: &str) -> String {
    text.lines()
        .find_map(|l| {
            let l = l.trim_start_matches('#').trim();
            l.strip_prefix("Library version:")
                .or_else(|| l.strip_prefix("Version "))
        })
        .map_or_else(|| "(version unknown)".into(), |v| v.trim().to_string())
}

/// ferrovia-perf over the vendored UCX.
fn build_vendored_perf() -> Result<PathBuf> {
    say!("xtask bench: building ferrovia-perf over UCX {VERSION} ({FEATURE}; cold: UCX itself)");
    let mut build = cmd::cargo();
    build.args(PERF.build_args());
    build.args([
        "--release",
        "--features",
        FEATURE,
        "--target-dir",
        VENDORED_TARGET,
    ]);
    cargo_artifacts::build(&mut build)?
        .into_iter()
        .find(|e| e.target_name == PERF.name())
        .map(|e| e.path)
        .ok_or_else(|| Failure::new(format!("cargo built no {}", PERF.name())))
}

/// `ucx_perftest` of the release ucx-rs vendors, from the tarball inside
/// that crate; built once, then reused.
fn build_perftest() -> Result<PathBuf> {
    let dir = workspace::root().join(PERFTEST_DIR);
    let prefix = dir.join("install");
    let program = prefix.join("bin/ucx_perftest");
    if program.exists() {
        return Ok(program);
    }
    let tarball = ucx_rs_dir()?.join(format!("vendor/ucx-{VERSION}.tar.gz"));
    say!(
        "xtask bench: building ucx_perftest {VERSION} from {} (once; a few minutes)",
        tarball.display()
    );
    std::fs::create_dir_all(&dir)
        .map_err(|e| io_failure(format!("cannot create {}", dir.display()), e))?;
    run(Command::new("tar")
        .arg("xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(&dir))?;
    let source = dir.join(format!("ucx-{VERSION}"));
    let mut configure = Command::new(source.join("configure"));
    configure
        .current_dir(&source)
        .arg(format!("--prefix={}", prefix.display()))
        .args(CONFIGURE);
    run(&mut configure)?;
    let jobs = std::thread::available_parallelism().map_or(2, usize::from);
    run(Command::new("make")
        .current_dir(&source)
        .arg(format!("-j{jobs}"))
        .arg("install"))?;
    if program.exists() {
        Ok(program)
    } else {
        Err(Failure::new(format!(
            "make install left no {}",
            program.display()
        )))
    }
}

/// Runs a build step, its output to the terminal.
fn run(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .map_err(|e| io_failure(format!("cannot run `{}`", cmd::describe(command)), e))?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure::new(format!(
            "`{}` failed ({status})",
            cmd::describe(command)
        )))
    }
}

/// The source directory of the ucx-rs package the vendored build uses.
fn ucx_rs_dir() -> Result<PathBuf> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .cargo_path(cmd::cargo_path())
        .features(cargo_metadata::CargoOpt::SomeFeatures(vec![FEATURE.into()]))
        .exec()
        .map_err(|e| Failure::new(format!("cargo metadata failed: {e}")))?;
    metadata
        .packages
        .iter()
        .find(|p| p.name.as_str() == "ucx-rs")
        .and_then(|p| p.manifest_path.parent())
        .map(|d| d.as_std_path().to_path_buf())
        .ok_or_else(|| Failure::new("cargo metadata names no ucx-rs package"))
}

/// One table: each UCX cell over both releases, each ferrovia next to
/// the ucx_perftest of its release, and ferrovia's 1.22 / system ratio.
fn side_by_side(releases: &[Release; 2], records: &[Vec<Record>]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| transport | test | size | unit | ferrovia, {a} | ucx_perftest, {a} | ratio | \
         ferrovia, {b} | ucx_perftest, {b} | ratio | ferrovia {b} / {a} | runs |\n\
         |---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        a = releases[0].name,
        b = releases[1].name,
    );
    for transport in [Transport::UcxTcp, Transport::UcxSm] {
        for case in plan::cases(transport) {
            let [ours_a, theirs_a, ours_b, theirs_b] = [
                (&records[0], Tool::Ferrovia),
                (&records[0], Tool::Reference),
                (&records[1], Tool::Ferrovia),
                (&records[1], Tool::Reference),
            ]
            .map(|(r, tool)| report::tool_runs(r, &case, tool));
            let show = |m: Option<f64>| m.map_or_else(|| "—".to_string(), report::number);
            let count = format!("{}+{} / {}+{}", ours_a.1, theirs_a.1, ours_b.1, theirs_b.1);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {count} |",
                report::transport_title(transport, "rxe0"),
                case.pair.name,
                report::size_name(case.size),
                unit(&case),
                show(ours_a.0),
                show(theirs_a.0),
                ratio(ours_a.0, theirs_a.0),
                show(ours_b.0),
                show(theirs_b.0),
                ratio(ours_b.0, theirs_b.0),
                ratio(ours_b.0, ours_a.0),
            );
        }
    }
    out
}

fn unit(case: &Case) -> &'static str {
    match case.pair.kind {
        Kind::Bandwidth => "MB/s",
        Kind::Latency => "µs typ.",
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "—".into(),
    }
}

/// The generated document.
fn document(table: &str, secs: u64) -> String {
    let now = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    format!(
        "# ferrovia over two UCX releases\n\n\
         Generated by `cargo xtask bench ucx-versions` (xtask/src/bench_compare/ucx_versions.rs); \
         rerunning it rewrites this file.\n\n\
         How to reproduce: `cargo xtask bench ucx-versions`. The UCX pairs of \
         `cargo xtask bench --compare` (`docs/benchmarks.md`), {REPS} repetitions per release, \
         the releases alternating repetition by repetition and the two tools alternating \
         inside each: ferrovia-perf built as usual over the system UCX next to the system's \
         ucx_perftest, and ferrovia-perf built with `--features ucx-vendored` (UCX {VERSION} \
         built by the `ucx-rs` crate and linked statically) next to ucx_perftest {VERSION} \
         built from the same tarball. Medians; ratio is ferrovia / ucx_perftest of the same \
         release (above 1 is better for bandwidth, below 1 for latency); the last ratio \
         compares ferrovia over the two releases. runs: how many runs gave a number, \
         ferrovia+ucx_perftest per release.\n\n\
         - Date: {now}; the run took {} min {} s.\n\
         - Host: {cpus} CPUs; server and client on this host (127.0.0.1).\n\n\
         {table}",
        secs / 60,
        secs % 60,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_read_from_old_and_new_ucx_info() {
        let old = "# Version 1.13.1\n# Git branch '<unknown>', revision 0000000\n";
        assert_eq!(version_of(old), "1.13.1");
        let new = "# Library version: 1.22.0\n# Library path: /x\n# API headers version: 1.22.0\n";
        assert_eq!(version_of(new), "1.22.0");
        assert_eq!(version_of("nothing here"), "(version unknown)");
    }

    fn record(file: usize, tool: Tool, value: f64) -> (usize, Record) {
        (
            file,
            Record {
                transport: Transport::UcxSm,
                test: plan::UCX_PAIRS[0].name.into(),
                size: plan::UCX_PAIRS[0].sizes[0],
                qps: 1,
                tool,
                rep: 1,
                outcome: Outcome::Measured { value, secs: 1.0 },
            },
        )
    }

    #[test]
    fn the_table_sets_each_release_beside_its_own_reference() {
        let mut records = vec![Vec::new(), Vec::new()];
        for (file, r) in [
            record(0, Tool::Ferrovia, 10.0),
            record(0, Tool::Reference, 20.0),
            record(1, Tool::Ferrovia, 30.0),
            record(1, Tool::Reference, 40.0),
        ] {
            records[file].push(r);
        }
        let releases = ["system UCX 1.13.1", "UCX 1.22.0 (ucx-rs)"].map(|name| Release {
            name: name.into(),
            perf: PathBuf::new(),
            perftest: PathBuf::new(),
        });
        let table = side_by_side(&releases, &records);
        let row = table
            .lines()
            .find(|l| l.contains("sm,self") && l.contains(plan::UCX_PAIRS[0].name))
            .unwrap();
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(
            &cells[5..12],
            ["10.0", "20.0", "0.50", "30.0", "40.0", "0.75", "3.00"]
        );
        assert_eq!(cells[12], "1+1 / 1+1");
    }
}
