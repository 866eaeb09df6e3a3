//! The device tests: already-built test binaries' ignored tests, the ones
//! that need an RDMA device, run one at a time with libtest's results
//! summed up. `cargo xtask test` runs them on the host when the host has a
//! device, else inside one VM boot for all binaries (there as the hidden
//! `xtask device-tests`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::failure::{Failure, Result, io_failure};
use crate::libtest::{self, Tally};
use crate::vm::{self, VmOptions};
use crate::workspace::ScratchFile;
use crate::{cmd, rdma_devices};

/// The variable naming the RDMA device, as the library reads it
/// (`ferrovia_verbs::Context::open_default`).
pub(crate) const DEVICE_VAR: &str = "FERROVIA_DEVICE";

/// A test executable and the package directory it runs in (like cargo test).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TestBinary {
    pub(crate) path: PathBuf,
    pub(crate) package_dir: PathBuf,
}

/// The subcommand's arguments:
/// `[--totals FILE] --test PACKAGE_DIR BINARY ... [-- TEST_ARGS]`.
pub(crate) fn to_args(
    totals: Option<&Path>,
    binaries: &[TestBinary],
    test_args: &[OsString],
) -> Vec<OsString> {
    let mut args = Vec::new();
    if let Some(file) = totals {
        args.extend(["--totals".into(), file.into()]);
    }
    for binary in binaries {
        args.extend([
            "--test".into(),
            binary.package_dir.clone().into(),
            binary.path.clone().into(),
        ]);
    }
    if !test_args.is_empty() {
        args.push("--".into());
        args.extend(test_args.iter().cloned());
    }
    args
}

/// `xtask device-tests`. With `totals`, the summed counts are also written
/// to that file (see [`Tally::to_totals_text`]), even when tests failed:
/// `cargo xtask test` reads them back after the VM is gone.
pub(crate) fn command(
    totals: Option<&Path>,
    binaries: &[TestBinary],
    test_args: &[OsString],
) -> Result<u8> {
    let (tally, result) = run(binaries, test_args);
    if let Some(file) = totals
        && let Err(e) = std::fs::write(file, tally.to_totals_text())
    {
        // The host cannot count the device tests without it: a failure too,
        // reported after the tests' own failure if there is one.
        let failure = io_failure(format!("cannot write {}", file.display()), e);
        return match result {
            Ok(()) => Err(failure),
            Err(tests) => {
                eprintln!("xtask device-tests: {failure}");
                Err(tests)
            }
        };
    }
    result.map(|()| 0)
}

/// On the host if it has an RDMA device, else all binaries in one VM boot:
/// xtask runs itself (`device-tests`) inside the guest, which sees the host's
/// filesystem, so the same paths work there. Returns the counts with the
/// verdict.
pub(crate) fn run_anywhere(binaries: &[TestBinary], test_args: &[OsString]) -> (Tally, Result<()>) {
    let devices = rdma_devices::host_devices();
    if let Some(device) = devices.first() {
        say!("xtask test: host RDMA device {device}: running the device tests here");
        return run(binaries, test_args);
    }
    say!(
        "xtask test: no RDMA device on this host: running the device tests in a VM (cargo xtask vm)"
    );
    match run_in_vm(binaries, test_args) {
        Ok((tally, result)) => (tally, result),
        Err(failure) => (Tally::default(), Err(failure)),
    }
}

fn run_in_vm(binaries: &[TestBinary], test_args: &[OsString]) -> Result<(Tally, Result<()>)> {
    // The guest writes its totals there; the host reads them once the VM
    // is gone.
    let totals = ScratchFile::new("device-totals")?;
    let mut command = vec![cmd::xtask_exe()?, "device-tests".into()];
    command.extend(to_args(Some(totals.path()), binaries, test_args));
    let status = vm::run(&VmOptions::new(command));
    let tally = Tally::from_totals_text(&totals.read());
    let result = match (status, tally) {
        (Ok(0), Some(_)) => Ok(()),
        (Ok(0), None) => Err(Failure::new(format!(
            "the device tests passed but left no totals in {}",
            totals.path().display()
        ))),
        (Ok(status), _) => Err(Failure::with_status("device tests failed", status)),
        (Err(failure), _) => Err(failure),
    };
    Ok((tally.unwrap_or_default(), result))
}

/// Runs the ignored tests of every binary and returns the summed counts with
/// the verdict: failed if any test failed or if none passed at all (a
/// device-test run that ran nothing proves nothing).
pub(crate) fn run(binaries: &[TestBinary], test_args: &[OsString]) -> (Tally, Result<()>) {
    let mut total = Tally::default();
    let result = run_all(binaries, test_args, &mut total);
    (total, result)
}

fn run_all(binaries: &[TestBinary], test_args: &[OsString], total: &mut Tally) -> Result<()> {
    if binaries.is_empty() {
        return Err(Failure::new("no test binaries given"));
    }
    let device = device()?;
    let started = Instant::now();
    for binary in binaries {
        *total += run_one(binary, test_args, &device)?;
    }
    say!(
        "device tests: {} passed, {} failed in {:.1} s",
        total.passed,
        total.failed,
        started.elapsed().as_secs_f64()
    );
    if total.failed > 0 {
        Err(Failure::new(format!(
            "{} device test(s) failed",
            total.failed
        )))
    } else if total.passed == 0 {
        Err(Failure::new("ran zero device tests"))
    } else {
        Ok(())
    }
}

/// `FERROVIA_DEVICE` (what `ferrovia_verbs::Context::open_default` reads),
/// else the host's first RDMA device.
fn device() -> Result<String> {
    if let Some(name) = std::env::var(DEVICE_VAR).ok().filter(|n| !n.is_empty()) {
        return Ok(name);
    }
    rdma_devices::host_devices()
        .into_iter()
        .next()
        .ok_or_else(|| {
            Failure::new("no RDMA device here (run the device tests through `cargo xtask test`)")
        })
}

fn run_one(binary: &TestBinary, test_args: &[OsString], device: &str) -> Result<Tally> {
    say!("xtask device-tests: {}", binary.path.display());
    let mut test = Command::new(&binary.path);
    test.args(["--ignored", "--test-threads=1"])
        .args(test_args)
        .env(DEVICE_VAR, device);
    test.current_dir(&binary.package_dir)
        .env("CARGO_MANIFEST_DIR", &binary.package_dir);
    let counted = libtest::run_counting(&mut test)?;
    let mut tally = counted.tally;
    if !counted.status.success() && tally.failed == 0 {
        // A crash (signal, abort) prints no failure count: count it as one.
        say!(
            "xtask device-tests: {} ended with {}{}",
            binary.path.display(),
            counted.status,
            if counted.summaries > 0 {
                ""
            } else {
                " before its summary"
            }
        );
        tally.failed += 1;
    }
    Ok(tally)
}
