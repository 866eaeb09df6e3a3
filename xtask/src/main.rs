//! `cargo xtask`: ferrovia's project automation. Subcommands: `deps`,
//! `softroce`, `vm`, `test`, `ci`, `demo`, `bench` (see `cargo xtask
//! --help`).
//! Its dependencies are pure-Rust crates, so it builds before `cargo
//! xtask deps` has installed the RDMA and UCX packages.

#[macro_use]
mod out;

mod bench;
mod bench_compare;
mod cargo_artifacts;
mod cmd;
mod demo;
mod deps;
mod device_tests;
mod failure;
mod layering;
mod libtest;
mod process;
mod ranks;
mod rdma_devices;
mod signals;
mod softroce;
mod test_suite;
mod two_host;
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
                          (on the host's RDMA device, else in the VM), then
                          ferrovia-rank in two VMs (vm --hosts 2; skipped on
                          a host with RDMA); ends with `ferrovia: N passed, M failed`
  ci [-- CARGO_ARGS [-- TEST_ARGS]]
                          cargo fmt --check, clippy -D warnings, doc with
                          warnings denied, then the same as `test`
  demo [node|pingpong|all]
                          build and run a demo (default node: 4 ranks of
                          ferrovia-rank demo; pingpong: rc_pingpong), on the
                          host's RDMA device, else in the VM
  bench barrier           barrier algorithms x 2/4/8/16 ranks in one VM boot
                          (on the host's RDMA device if any): markdown tables
  bench --compare         ferrovia-perf next to perftest (soft-RoCE, one VM
                          boot) and ucx_perftest (UCX tcp, sm on the host):
                          medians and ratios, written to docs/benchmarks.md";

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
        "bench" => bench::command(&args),
        // Hidden: what `test`, `demo` and `bench` run inside the VM, and
        // single steps of `test`.
        "device-tests" => device_tests::command(&args),
        "ranks" => ranks::command(&args),
        "bench-barrier-sweep" => bench::sweep_command(&args),
        "bench-compare-sweep" => bench_compare::sweep_command(&args),
        "layering" => layering::command(&args),
        "two-host" => two_host::command(&args),
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
