//! `cargo xtask`: ferrovia's project automation. Subcommands: `deps`,
//! `softroce`, `vm`, `test`, `ci`, `demo` (see `cargo xtask --help`).
//! Dependencies are std plus libc only, so it builds on a bare machine
//! before any RDMA package is installed.

#[macro_use]
mod out;

mod cargo_artifacts;
mod cmd;
mod demo;
mod deps;
mod device_tests;
mod failure;
mod json;
mod layering;
mod libtest;
mod rdma_devices;
mod signals;
mod softroce;
mod test_suite;
mod vm;
mod workspace;

use std::ffi::OsString;
use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <COMMAND> [ARGS]

commands:
  deps [--check]          install (as root) or check the Debian packages needed
  softroce [--down]       create (remove) soft-RoCE device rxe0 on this host's kernel
  vm [OPTIONS] -- CMD...  run CMD in a qemu VM that has soft-RoCE device rxe0
                          (cargo xtask vm --help for the options)
  test [-- CARGO_ARGS [-- TEST_ARGS]]
                          packages, layering check, host tests, device tests
                          (on the host's RDMA device, else in the VM);
                          ends with `ferrovia: N passed, M failed`
  ci [-- CARGO_ARGS [-- TEST_ARGS]]
                          cargo fmt --check, clippy -D warnings, doc with
                          warnings denied, then the same as `test`
  demo                    build and run the demos";

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.is_empty() {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    let name = args.remove(0).to_string_lossy().into_owned();
    let result = match name.as_str() {
        "deps" => deps::command(&args),
        "softroce" => softroce::command(&args),
        "vm" => vm::command(&args),
        "test" => test_suite::command(test_suite::Mode::Test, &args),
        "ci" => test_suite::command(test_suite::Mode::Ci, &args),
        "demo" => demo::command(&args),
        // Hidden: what `test` runs inside the VM, and its step 2 alone.
        "device-tests" => device_tests::command(&args),
        "layering" => layering::command(&args),
        "-h" | "--help" | "help" => {
            say!("{USAGE}");
            Ok(0)
        }
        _ => Err(failure::Failure::with_status(
            format!("unknown command {name:?}\n{USAGE}"),
            2,
        )),
    };
    match result {
        Ok(status) => ExitCode::from(status),
        Err(failure) => {
            if !failure.is_reported() {
                eprintln!("xtask {name}: {failure}");
            }
            ExitCode::from(failure.status())
        }
    }
}
