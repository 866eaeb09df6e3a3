//! `xtask device-tests` (hidden): runs already-built test binaries' ignored
//! tests, the ones that need an RDMA device, one at a time, and sums up
//! libtest's results. `cargo xtask test` runs it on the host when the host
//! has a device, else inside one VM boot for all binaries.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::failure::{Failure, Result, io_failure};
use crate::libtest::{self, Tally};
use crate::rdma_devices;

/// The variable naming the RDMA device, as the library reads it
/// (`ferrovia_verbs::Context::open_default`).
pub(crate) const DEVICE_VAR: &str = "FERROVIA_DEVICE";

/// A test executable and the package directory it runs in (like cargo test).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TestBinary {
    pub(crate) path: PathBuf,
    pub(crate) package_dir: Option<PathBuf>,
}

/// The subcommand's arguments:
/// `[--totals FILE] [--dir DIR] BIN ... [-- TEST_ARGS]`.
pub(crate) fn to_args(
    totals: Option<&Path>,
    binaries: &[TestBinary],
    test_args: &[OsString],
) -> Vec<OsString> {
    let mut args = Vec::new();
    if let Some(file) = totals {
        args.push("--totals".into());
        args.push(file.into());
    }
    for binary in binaries {
        if let Some(dir) = &binary.package_dir {
            args.push("--dir".into());
            args.push(dir.into());
        }
        args.push(binary.path.clone().into());
    }
    if !test_args.is_empty() {
        args.push("--".into());
        args.extend(test_args.iter().cloned());
    }
    args
}

/// The parsed arguments of the subcommand.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    totals: Option<PathBuf>,
    binaries: Vec<TestBinary>,
    test_args: Vec<OsString>,
}

/// Inverse of [`to_args`].
fn parse_args(args: &[OsString]) -> Result<Args> {
    let mut parsed = Args {
        totals: None,
        binaries: Vec::new(),
        test_args: Vec::new(),
    };
    let mut dir = None;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "--" {
            parsed.test_args = iter.cloned().collect();
            break;
        } else if arg == "--dir" || arg == "--totals" {
            let value = iter.next().ok_or_else(|| {
                Failure::with_status(format!("{} needs a value", arg.display()), 2)
            })?;
            if arg == "--dir" {
                dir = Some(PathBuf::from(value));
            } else {
                parsed.totals = Some(PathBuf::from(value));
            }
        } else {
            parsed.binaries.push(TestBinary {
                path: arg.into(),
                package_dir: dir.take(),
            });
        }
    }
    Ok(parsed)
}

/// `xtask device-tests [--totals FILE] [--dir DIR] BIN ... [-- TEST_ARGS]`.
/// With `--totals`, the summed counts are also written to FILE (see
/// [`Tally::to_totals_text`]), even when tests failed: `cargo xtask test`
/// reads them back after the VM is gone.
pub(crate) fn command(args: &[OsString]) -> Result<u8> {
    let args = parse_args(args)?;
    let (tally, result) = run(&args.binaries, &args.test_args);
    if let Some(file) = &args.totals
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
    if let Some(dir) = &binary.package_dir {
        test.current_dir(dir).env("CARGO_MANIFEST_DIR", dir);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_round_trip() {
        let binaries = vec![
            TestBinary {
                path: "/t/a-1".into(),
                package_dir: Some("/w/crates/a".into()),
            },
            TestBinary {
                path: "/t/b-2".into(),
                package_dir: None,
            },
        ];
        let test_args = vec![OsString::from("--nocapture")];
        let totals = PathBuf::from("/w/target/xtask/device-totals-1");
        let args = to_args(Some(&totals), &binaries, &test_args);
        assert_eq!(
            parse_args(&args).unwrap(),
            Args {
                totals: Some(totals),
                binaries: binaries.clone(),
                test_args: test_args.clone(),
            }
        );
        let args = to_args(None, &binaries, &[]);
        assert_eq!(
            parse_args(&args).unwrap(),
            Args {
                totals: None,
                binaries,
                test_args: Vec::new(),
            }
        );
        assert!(parse_args(&[OsString::from("--dir")]).is_err());
        assert!(parse_args(&[OsString::from("--totals")]).is_err());
    }
}
