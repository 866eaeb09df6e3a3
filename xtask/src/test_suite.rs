//! `cargo xtask test [-- CARGO_TEST_ARGS [-- TEST_ARGS]]`: the project's
//! whole test run, as README and CI use it: packages, layering, host tests,
//! the device tests on a real or VM-provided RDMA device, then the two-host
//! tests in a pair of VMs (see [`two_host`] and [`two_host_by_address`]).
//! It ends with two lines, the last one `ferrovia: N passed, M failed` for
//! CI.
//!
//! `cargo xtask ci [...]`: rustfmt, clippy and rustdoc checks, then the same.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use cargo_metadata::TargetKind;

use crate::cargo_artifacts::{self, RANK};
use crate::device_tests::{self, TestBinary};
use crate::failure::{Failure, Result};
use crate::libtest::Tally;
use crate::{
    cmd, deps, layering, libtest, two_host, two_host_by_address, without_rdma_core, workspace,
};

/// Which subcommand runs the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `cargo xtask test`: packages, layering, host tests, device tests,
    /// the two-host test.
    Test,
    /// `cargo xtask ci`: the same, after rustfmt, clippy and rustdoc.
    Ci,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Test => "test",
            Mode::Ci => "ci",
        }
    }
}

/// The tests counted so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    host: Tally,
    device: Tally,
    /// The UCX-only build's tests and the run with libibverbs hidden.
    without_rdma_core: Tally,
    /// One test, when it ran.
    two_host: Tally,
    /// The host has its own RDMA device, so the VM pair did not run.
    two_host_skipped: bool,
}

/// `cargo xtask test ...` or `cargo xtask ci ...`. Always ends with the two
/// closing lines CI reads (see [`closing_lines`]), failure or not; a
/// failure's message is printed before them.
pub(crate) fn command(mode: Mode, args: &[OsString]) -> Result<u8> {
    let started = Instant::now();
    let mut counts = Counts::default();
    let result = run(mode, args, &mut counts);
    if let Err(failure) = &result {
        eprintln!("xtask {}: {failure}", mode.name());
        let _ = std::io::stderr().flush();
    }
    say!(
        "{}",
        closing_lines(&counts, started.elapsed().as_secs_f64())
    );
    result.map(|()| 0).map_err(Failure::reported)
}

/// The last two lines of a run: the split, then the plain
/// `ferrovia: N passed, M failed` that CI counts.
fn closing_lines(counts: &Counts, seconds: f64) -> String {
    let two_host = if counts.two_host_skipped {
        "skipped".to_string()
    } else {
        format!("{} passed", counts.two_host.passed)
    };
    let mut all = counts.host;
    all += counts.device;
    all += counts.without_rdma_core;
    all += counts.two_host;
    format!(
        "xtask test: host tests {} passed; device tests {} passed; without rdma-core {} passed; \
         two-host tests {two_host}; total time {seconds:.1} s\n\
         ferrovia: {} passed, {} failed",
        counts.host.passed,
        counts.device.passed,
        counts.without_rdma_core.passed,
        all.passed,
        all.failed,
    )
}

/// A failed step whose output counted no failed test (a test binary that
/// crashed, a compile error, a VM that did not boot, zero device tests) is
/// one failure, so that the closing line never says `0 failed` for a run
/// that failed in its tests.
fn settle(mut tally: Tally, ok: bool) -> Tally {
    if !ok && tally.failed == 0 {
        tally.failed = 1;
    }
    tally
}

/// Splits `[--] [CARGO_ARGS] [-- TEST_ARGS]`.
fn split_args(args: &[OsString]) -> (&[OsString], &[OsString]) {
    let args = match args.first() {
        Some(first) if first == "--" => &args[1..],
        _ => args,
    };
    match args.iter().position(|a| a == "--") {
        Some(at) => (&args[..at], &args[at + 1..]),
        None => (args, &[][..]),
    }
}

/// Prints `xtask test: [n/N] what`.
struct Steps {
    mode: Mode,
    done: usize,
}

impl Steps {
    /// deps, layering, host tests, bench builds, device tests, without
    /// rdma-core, the two-host test and the two-host connection by
    /// address (plus the CI checks).
    fn total(&self) -> usize {
        match self.mode {
            Mode::Test => 8,
            Mode::Ci => 8 + checks().len(),
        }
    }

    fn next(&mut self, what: &str) {
        self.done += 1;
        say!(
            "xtask {}: [{}/{}] {what}",
            self.mode.name(),
            self.done,
            self.total()
        );
    }
}

/// The feature sets linted beside the default one: a package and the
/// features it is built with, without its defaults (`""`: none). The
/// facade with UCX only, verbs only and everything; each crate that picks
/// a backend by feature with either alone. (The layers below the backends
/// have no backend features: the backends are crates of their own.)
const FEATURE_SETS: &[(&str, &str)] = &[
    ("ferrovia", "ucx"),
    ("ferrovia", "verbs"),
    ("ferrovia", "verbs,ucx,async,transfer,metrics"),
    ("ferrovia", "ucx,pmix,etcd"),
    ("ferrovia-node", "ucx"),
    ("ferrovia-node", "verbs"),
    ("ferrovia-async", "ucx"),
    ("ferrovia-async", "verbs"),
    ("ferrovia-transfer", "ucx"),
    ("ferrovia-transfer", "verbs"),
    ("ferrovia-testkit", "ucx"),
    ("ferrovia-testkit", "verbs"),
    ("ferrovia-testkit", ""),
];

/// The static checks `cargo xtask ci` (and `cargo xtask checks`, which
/// `.ci/run` calls) runs before the tests, in order: rustfmt, clippy on
/// the workspace and on each of [`FEATURE_SETS`], rustdoc, and the
/// package step: every crate users depend on packs as crates.io would
/// take it (`--allow-dirty` so it runs before a commit too; CI's clone is
/// clean; the tidy test `published_crates_carry_their_package_metadata`
/// holds the metadata, which cargo only warns about).
pub(crate) fn checks() -> Vec<Vec<String>> {
    let words = |w: &[&str]| w.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let lint = ["--all-targets", "--", "-D", "warnings"];
    let mut all = vec![
        words(&["fmt", "--all", "--", "--check"]),
        words(&["clippy", "--workspace"]),
    ];
    all[1].extend(words(&lint));
    for (package, features) in FEATURE_SETS {
        let mut c = words(&["clippy", "-p", package, "--no-default-features"]);
        if !features.is_empty() {
            c.extend(words(&["--features", features]));
        }
        c.extend(words(&lint));
        all.push(c);
    }
    all.push(words(&["doc", "--workspace", "--no-deps"]));
    let mut package = words(&["package", "--workspace", "--no-verify", "--allow-dirty"]);
    for unpublished in workspace::UNPUBLISHED {
        package.extend(words(&["--exclude", unpublished]));
    }
    all.push(package);
    all
}

/// `cargo xtask checks` (hidden): only the static checks, each named as
/// it runs.
pub(crate) fn checks_command() -> Result<u8> {
    workspace::enter_root()?;
    let all = checks();
    for (i, words) in all.iter().enumerate() {
        say!(
            "xtask checks: [{}/{}] cargo {}",
            i + 1,
            all.len(),
            words.join(" ")
        );
        cmd::run(&mut check_command(words))?;
    }
    Ok(0)
}

/// The cargo command of a [`checks`] entry; rustdoc warnings are errors.
fn check_command(words: &[String]) -> Command {
    let mut cargo = cmd::cargo();
    cargo.args(words);
    if words.first().is_some_and(|w| w == "doc") {
        let mut flags = std::env::var_os("RUSTDOCFLAGS").unwrap_or_default();
        if !flags.is_empty() {
            flags.push(" ");
        }
        flags.push("-D warnings");
        cargo.env("RUSTDOCFLAGS", flags);
    }
    cargo
}

fn run(mode: Mode, args: &[OsString], counts: &mut Counts) -> Result<()> {
    let (cargo_args, test_args) = split_args(args);
    workspace::enter_root()?;
    let mut steps = Steps { mode, done: 0 };

    steps.next("packages (cargo xtask deps)");
    deps::ensure(deps::ALL)?;

    if mode == Mode::Ci {
        for words in checks() {
            let mut check = check_command(&words);
            let doc_flags = if words.first().is_some_and(|w| w == "doc") {
                " (RUSTDOCFLAGS=-D warnings)"
            } else {
                ""
            };
            steps.next(&format!("cargo {}{doc_flags}", words.join(" ")));
            cmd::run(&mut check)?;
        }
    }

    steps.next("layering check");
    layering::check()?;

    steps.next("host tests: cargo test --workspace");
    let mut host = cmd::cargo();
    host.arg("test")
        .args(workspace_unless_packages(cargo_args))
        .args(cargo_args);
    if !test_args.is_empty() {
        host.arg("--").args(test_args);
    }
    let counted = libtest::run_counting(&mut host)?;
    counts.host = settle(counted.tally, counted.status.success());
    if !counted.status.success() {
        return Err(Failure::new(format!(
            "`{}` failed ({})",
            cmd::describe(&host),
            counted.status
        )));
    }

    steps.next("benchmarks build: cargo test --workspace --benches --no-run");
    let mut benches = cmd::cargo();
    benches
        .args(["test", "--benches", "--no-run"])
        .args(workspace_unless_packages(cargo_args))
        .args(cargo_args);
    cmd::run(&mut benches)?;

    steps.next("device tests");
    let built = build_device_tests(cargo_args)?;
    let (tally, result) = device_tests::run_anywhere(&built.tests, test_args);
    counts.device = settle(tally, result.is_ok());
    result?;

    steps.next(without_rdma_core::TITLE);
    let (tally, result) = without_rdma_core::run(built.rank_program.as_deref());
    counts.without_rdma_core = settle(tally, result.is_ok());
    result?;

    steps.next(two_host::TITLE);
    if let Some(reason) = two_host::skip_reason() {
        say!("xtask {}: {reason}", mode.name());
        counts.two_host_skipped = true;
        return Ok(());
    }
    let (tally, exchange) = two_host::EXCHANGE.run(built.rank_program.as_deref());
    counts.two_host = tally;

    steps.next(two_host_by_address::TITLE);
    let (tally, by_address) = two_host_by_address::BY_ADDRESS.run(built.accept_clients.as_deref());
    counts.two_host += tally;
    exchange.and(by_address)
}

/// `--workspace`, unless the caller picked packages (`-p X`), which cargo
/// would otherwise ignore in favour of `--workspace`.
fn workspace_unless_packages(cargo_args: &[OsString]) -> Option<&'static str> {
    let picks_packages = cargo_args.iter().any(|a| {
        let a = a.to_string_lossy();
        a.starts_with("--package") || (a.starts_with("-p") && !a.starts_with("--"))
    });
    (!picks_packages).then_some("--workspace")
}

/// What `cargo test --no-run` built.
struct Built {
    /// The test executables.
    tests: Vec<TestBinary>,
    /// `ferrovia-rank` (the multi-process tests of ferrovia-testkit run it, so cargo
    /// builds it with them), for the two-host test.
    rank_program: Option<PathBuf>,
    /// The `accept_clients` example (cargo builds examples for tests), for
    /// the two-host connection-by-address test.
    accept_clients: Option<PathBuf>,
}

/// Builds the test executables (`cargo test --no-run`) and lists them.
fn build_device_tests(cargo_args: &[OsString]) -> Result<Built> {
    let mut build = cmd::cargo();
    build
        .arg("test")
        .args(workspace_unless_packages(cargo_args))
        .args(["--no-run", "--message-format=json"])
        .args(cargo_args);
    let built = cargo_artifacts::build(&mut build)?;
    let rank_program = built
        .iter()
        .find(|e| !e.is_test && e.target_name == RANK.name() && e.kinds.contains(&TargetKind::Bin))
        .map(|e| e.path.clone());
    let accept_clients = built
        .iter()
        .find(|e| {
            !e.is_test
                && e.target_name == two_host_by_address::EXAMPLE.name()
                && e.kinds.contains(&TargetKind::Example)
        })
        .map(|e| e.path.clone());
    let tests: Vec<TestBinary> = built
        .into_iter()
        .filter(|e| e.is_test)
        .map(|e| TestBinary {
            path: e.path,
            package_dir: e.package_dir,
        })
        .collect();
    if tests.is_empty() {
        return Err(Failure::new(
            "cargo test --no-run built no test executables",
        ));
    }
    Ok(Built {
        tests,
        rank_program,
        accept_clients,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn splits_cargo_and_test_args() {
        let none: &[OsString] = &[];
        assert_eq!(split_args(&[]), (none, none));
        let args = os(&["--", "--release", "--", "--nocapture"]);
        assert_eq!(split_args(&args), (&args[1..2], &args[3..]));
        let args = os(&["-p", "ferrovia-mr"]);
        assert_eq!(split_args(&args), (&args[..], none));
    }

    #[test]
    fn closing_lines_sum_every_step() {
        let mut counts = Counts {
            host: Tally {
                passed: 120,
                failed: 2,
                ignored: 30,
            },
            device: Tally {
                passed: 30,
                failed: 1,
                ignored: 0,
            },
            without_rdma_core: Tally {
                passed: 5,
                failed: 0,
                ignored: 1,
            },
            two_host: Tally {
                passed: 1,
                failed: 0,
                ignored: 0,
            },
            two_host_skipped: false,
        };
        assert_eq!(
            closing_lines(&counts, 93.27),
            "xtask test: host tests 120 passed; device tests 30 passed; without rdma-core 5 passed; \
             two-host tests 1 passed; total time 93.3 s\n\
             ferrovia: 156 passed, 3 failed"
        );
        counts.two_host = Tally {
            passed: 0,
            failed: 1,
            ignored: 0,
        };
        assert_eq!(
            closing_lines(&counts, 1.0).lines().last(),
            Some("ferrovia: 155 passed, 4 failed")
        );
        counts.two_host = Tally::default();
        counts.two_host_skipped = true;
        let text = closing_lines(&counts, 1.0);
        assert!(text.contains("; two-host tests skipped; "), "{text}");
        assert_eq!(text.lines().last(), Some("ferrovia: 155 passed, 3 failed"));
        let text = closing_lines(&Counts::default(), 0.0);
        assert_eq!(text.lines().last(), Some("ferrovia: 0 passed, 0 failed"));
    }

    #[test]
    fn a_failed_step_counts_at_least_one_failure() {
        let tally = Tally {
            passed: 4,
            failed: 0,
            ignored: 0,
        };
        assert_eq!(settle(tally, true), tally);
        assert_eq!(settle(tally, false).failed, 1);
        let failed = Tally { failed: 3, ..tally };
        assert_eq!(settle(failed, false), failed);
    }

    #[test]
    fn ci_checks_in_order() {
        let lines: Vec<String> = checks()
            .iter()
            .map(|words| {
                let cargo = check_command(words);
                let mut line = cmd::describe(&cargo);
                // Drop the cargo path, which depends on $CARGO.
                line = line
                    .split_once(' ')
                    .map(|(_, rest)| rest.to_string())
                    .unwrap();
                let flags = cargo
                    .get_envs()
                    .find(|(k, _)| *k == "RUSTDOCFLAGS")
                    .and_then(|(_, v)| v)
                    .map(|v| v.to_string_lossy().into_owned());
                if let Some(flags) = flags {
                    assert!(flags.ends_with("-D warnings"), "{flags}");
                    line.push_str(" [RUSTDOCFLAGS]");
                }
                line
            })
            .collect();
        assert_eq!(lines[0], "fmt --all -- --check");
        assert_eq!(lines[1], "clippy --workspace --all-targets -- -D warnings");
        assert_eq!(
            lines[2],
            "clippy -p ferrovia --no-default-features --features ucx --all-targets -- -D warnings"
        );
        assert!(lines.contains(
            &"clippy -p ferrovia-node --no-default-features --features verbs --all-targets -- -D warnings".into()
        ));
        assert_eq!(lines.len(), 4 + FEATURE_SETS.len());
        assert_eq!(
            lines[lines.len() - 2],
            "doc --workspace --no-deps [RUSTDOCFLAGS]"
        );
        assert_eq!(
            lines[lines.len() - 1],
            "package --workspace --no-verify --allow-dirty --exclude xtask \
             --exclude ferrovia-benches --exclude ferrovia-testkit"
        );
        assert_eq!(
            Steps {
                mode: Mode::Ci,
                done: 0
            }
            .total(),
            8 + 4 + FEATURE_SETS.len()
        );
        assert_eq!(
            Steps {
                mode: Mode::Test,
                done: 0
            }
            .total(),
            8
        );
    }

    #[test]
    fn package_selection_replaces_workspace() {
        let args = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(workspace_unless_packages(&args(&[])), Some("--workspace"));
        assert_eq!(
            workspace_unless_packages(&args(&["--release"])),
            Some("--workspace")
        );
        assert_eq!(
            workspace_unless_packages(&args(&["-p", "ferrovia-mr"])),
            None
        );
        assert_eq!(workspace_unless_packages(&args(&["-pferrovia-mr"])), None);
        assert_eq!(
            workspace_unless_packages(&args(&["--package=ferrovia-mr"])),
            None
        );
    }
}
