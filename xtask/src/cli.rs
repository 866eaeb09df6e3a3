//! xtask's command line: every subcommand and its arguments (clap derive,
//! so `--help` and errors that name the bad argument come for free), and
//! the dispatch to the module that does the work.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::bench_compare::Transport;
use crate::device_tests::TestBinary;
use crate::failure::Result;
use crate::vm::{Accel, VmOptions};
use crate::{
    bench, bench_compare, demo, deps, device_tests, layering, ranks, softroce, test_suite,
    two_host, two_host_by_address, vm,
};

/// ferrovia's project automation.
#[derive(Debug, Parser)]
#[command(name = "xtask", bin_name = "cargo xtask")]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Install (as root) or check the Debian packages needed.
    Deps {
        /// Only list what is missing (exit status 1 if anything is).
        #[arg(long)]
        check: bool,
    },
    /// Create soft-RoCE device rxe0 on this host's kernel.
    Softroce {
        /// Remove it (and the dummy netdev it may have made) instead.
        #[arg(long)]
        down: bool,
    },
    /// Run CMD in a qemu VM that has soft-RoCE devices rxe0 and rxe1.
    ///
    /// The host's / is read-only with a RAM overlay, the current directory
    /// read-write. Exits with CMD's status (124: --timeout expired, 125:
    /// the VM or its setup failed).
    Vm(VmArgs),
    /// Packages, layering check, host tests, bench builds, device tests (on
    /// the host's RDMA device, else in the VM), then ferrovia-rank in two VMs.
    ///
    /// Ends with `ferrovia: N passed, M failed`.
    Test(SuiteArgs),
    /// cargo fmt --check, clippy -D warnings (the workspace and each
    /// supported feature set) and doc with warnings denied, then the same
    /// as `test`.
    Ci(SuiteArgs),
    /// Build and run a demo, on the host's RDMA device where it needs one,
    /// else in the VM.
    Demo {
        /// node: 4 ranks of ferrovia-rank demo on this host;
        /// node-softroce: the same over verbs in the VM; pingpong:
        /// rc_pingpong; all: each of them.
        #[arg(default_value = demo::DEFAULT, value_parser = demo::names())]
        name: String,
    },
    /// barrier: barrier algorithms x 2/4/8/16 ranks in one VM boot;
    /// bootstrap: 2/4/8 ranks meeting over each engine (rank 0's
    /// rendezvous, PMIx, etcd) on this host, and a rank replaced through
    /// etcd;
    /// --compare: ferrovia-perf next to perftest and ucx_perftest, written
    /// to docs/benchmarks.md; ucx-versions: the UCX pairs over the system
    /// UCX and over UCX 1.22 (ucx-rs), each next to its own ucx_perftest,
    /// written to docs/benchmarks-ucx-versions.md; soak: the soak with
    /// faults (8 ranks over UCX tcp on the host, then 4 over verbs in the
    /// VM), --minutes each.
    Bench {
        #[arg(value_parser = ["barrier", "bootstrap", "compare", "ucx-versions", "soak"], required_unless_present = "compare")]
        what: Option<String>,
        /// With soak: how long each of its two runs lasts.
        #[arg(long, default_value_t = 30)]
        minutes: u64,
        /// The same as `compare`.
        #[arg(long, conflicts_with = "what")]
        compare: bool,
        /// With compare: only the UCX pairs, on this host (no VM, no
        /// verbs); the table is printed and docs/benchmarks.md is left as
        /// it is (it holds a whole run).
        #[arg(long)]
        ucx_only: bool,
    },
    // Hidden: what `test`, `demo` and `bench` run inside the VM, and single
    // steps of `test`.
    /// Run built test binaries' ignored tests (what `test` runs in the VM).
    #[command(hide = true)]
    DeviceTests {
        /// Also write the summed counts to FILE.
        #[arg(long, value_name = "FILE")]
        totals: Option<PathBuf>,
        /// A test executable and the package directory it runs in.
        #[arg(long = "test", num_args = 2, value_names = ["PACKAGE_DIR", "BINARY"], required = true)]
        tests: Vec<PathBuf>,
        #[arg(last = true)]
        test_args: Vec<OsString>,
    },
    /// Run N ranks of PROGRAM as one job on this machine.
    #[command(hide = true)]
    Ranks {
        #[arg(long, value_name = "SECS", value_parser = seconds)]
        timeout: Option<Duration>,
        #[arg(value_parser = clap::value_parser!(u16).range(1..))]
        ranks: u16,
        program: PathBuf,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// The barrier sweep of `bench barrier`, appending to FILE.
    #[command(hide = true)]
    BenchBarrierSweep { file: PathBuf, program: PathBuf },
    /// One sweep of `bench --compare`, appending to FILE; none starts after
    /// BUDGET_SECS. `--barrier RANK`: the barrier sweep gets what is left.
    #[command(hide = true)]
    BenchCompareSweep {
        file: PathBuf,
        perf: PathBuf,
        #[arg(value_name = "BUDGET_SECS", value_parser = seconds)]
        budget: Duration,
        #[arg(long, value_name = "RANK")]
        barrier: Option<PathBuf>,
        /// Mooncake over rdma after the verbs stages: te_bench.py run by
        /// PYTHON (a ready venv's), its JSON lines to OUT.
        #[arg(long, num_args = 2, value_names = ["PYTHON", "OUT"])]
        mooncake: Option<Vec<PathBuf>>,
        /// [default: verbs]
        #[arg(value_parser = transport)]
        transports: Vec<Transport>,
    },
    /// The Mooncake Transfer Engine's batch rows alone (its venv made if
    /// missing): tcp on the host, rdma on the host's device or in the VM.
    #[command(hide = true)]
    BenchMooncake {
        #[arg(default_value = "all", value_parser = ["tcp", "rdma", "all"])]
        transport: String,
        /// Small batches once, not every shape 3 times.
        #[arg(long)]
        smoke: bool,
    },
    /// Only the layering check of `test`.
    #[command(hide = true)]
    Layering,
    /// Only the static checks of `ci` (rustfmt, clippy on every feature
    /// set, rustdoc), as `.ci/run` runs them.
    #[command(hide = true)]
    Checks,
    /// Only the two-host test of `test` (builds ferrovia-rank first).
    #[command(hide = true)]
    TwoHost,
    /// Only the two-host connection-by-address test of `test` (builds the
    /// accept_clients example first).
    #[command(hide = true)]
    TwoHostByAddress,
}

/// The arguments of `cargo xtask vm`.
#[derive(Debug, clap::Args)]
struct VmArgs {
    /// Whole run, all boot attempts included [default: 1800].
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    timeout: Option<Duration>,
    /// A boot not done by then is retried, 3 tries [default: 120].
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    boot_timeout: Option<Duration>,
    /// Guest RAM, as qemu's -m (2G, 1536M) [default: 2G].
    #[arg(long, value_name = "SIZE", value_parser = memory)]
    mem: Option<String>,
    /// vCPUs per guest [default: 2; 1 with --hosts 2].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    smp: Option<u32>,
    /// 1, or 2 VMs joined by two virtual wires (rxe0: 192.168.78.1 and .2,
    /// rxe1: 192.168.88.1 and .2).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    hosts: u8,
    /// How qemu runs the guests.
    #[arg(long, value_enum, default_value_t = Accel::Auto)]
    accel: Accel,
    /// Show the guest console on stderr.
    #[arg(short, long)]
    verbose: bool,
    /// The command and its arguments (a first word starting with `-` is
    /// an option of `vm`).
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<OsString>,
}

impl VmArgs {
    fn options(self) -> VmOptions {
        let mut options = VmOptions::new(self.command);
        if let Some(timeout) = self.timeout {
            options.timeout = timeout;
        }
        if let Some(boot_timeout) = self.boot_timeout {
            options.boot_timeout = boot_timeout;
        }
        if let Some(mem) = self.mem {
            options.mem = mem;
        }
        options.smp = self.smp;
        options.hosts = usize::from(self.hosts);
        options.accel = self.accel;
        options.verbose = self.verbose;
        options
    }
}

/// The arguments of `test` and `ci`.
#[derive(Debug, clap::Args)]
struct SuiteArgs {
    /// `[--] CARGO_ARGS [-- TEST_ARGS]`: for `cargo test` (a `-p` replaces
    /// `--workspace`), and after a second `--` for the test binaries.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<OsString>,
}

/// A whole number of seconds, more than 0.
pub(crate) fn seconds(text: &str) -> std::result::Result<Duration, String> {
    match text.parse::<u64>() {
        Ok(secs) if secs > 0 => Ok(Duration::from_secs(secs)),
        _ => Err("a whole number of seconds > 0".into()),
    }
}

/// qemu's `-m` syntax: a number with an optional K/M/G/T suffix.
fn memory(text: &str) -> std::result::Result<String, String> {
    let digits = text.trim_end_matches(['K', 'M', 'G', 'T', 'k', 'm', 'g', 't']);
    let suffix_len = text.len() - digits.len();
    if suffix_len <= 1 && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        Ok(text.to_string())
    } else {
        Err("a size such as 2G or 1536M".into())
    }
}

/// `--test PACKAGE_DIR BINARY` pairs, as clap collects them (one list).
fn test_binaries(pairs: Vec<PathBuf>) -> Vec<TestBinary> {
    pairs
        .chunks(2)
        .map(|pair| TestBinary {
            package_dir: pair[0].clone(),
            path: pair[1].clone(),
        })
        .collect()
}

/// A transport of `bench --compare` by its key (`verbs`, `ucx-tcp`, `ucx-sm`).
fn transport(key: &str) -> std::result::Result<Transport, String> {
    Transport::from_key(key).ok_or_else(|| "verbs, ucx-tcp or ucx-sm".into())
}

/// Runs the subcommand; its exit status, or what went wrong.
pub(crate) fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Deps { check } => deps::command(check),
        Command::Softroce { down } => softroce::command(down),
        Command::Vm(args) => vm::run(&args.options()),
        Command::Test(args) => test_suite::command(test_suite::Mode::Test, &args.args),
        Command::Ci(args) => test_suite::command(test_suite::Mode::Ci, &args.args),
        Command::Demo { name } => demo::command(&name),
        // clap lets through `barrier`, `compare` or `--compare`.
        Command::Bench { what, ucx_only, .. } if what.as_deref() == Some("barrier") => {
            if ucx_only {
                return Err(crate::failure::Failure::new(
                    "--ucx-only applies to bench --compare, not to bench barrier",
                ));
            }
            bench::barrier()
        }
        Command::Bench { what, .. } if what.as_deref() == Some("ucx-versions") => {
            bench_compare::ucx_versions::command()
        }
        Command::Bench { what, .. } if what.as_deref() == Some("bootstrap") => {
            crate::bench_bootstrap::command()
        }
        Command::Bench { what, minutes, .. } if what.as_deref() == Some("soak") => {
            crate::soak::command(minutes)
        }
        Command::Bench { ucx_only, .. } => bench_compare::command(ucx_only),
        Command::DeviceTests {
            totals,
            tests,
            test_args,
        } => device_tests::command(totals.as_deref(), &test_binaries(tests), &test_args),
        Command::Ranks {
            timeout,
            ranks,
            program,
            args,
        } => {
            let mut job = ranks::Job::new(program, usize::from(ranks), args);
            job.timeout = timeout.unwrap_or(job.timeout);
            ranks::command(&job)
        }
        Command::BenchBarrierSweep { file, program } => bench::sweep_command(&file, &program),
        Command::BenchCompareSweep {
            file,
            perf,
            budget,
            barrier,
            mooncake,
            transports,
        } => {
            let job = mooncake.map(|words| bench_compare::mooncake::compare::Job {
                python: words[0].clone(),
                out: words[1].clone(),
            });
            bench_compare::sweep_command(&file, &perf, budget, barrier.as_deref(), job, transports)
        }
        Command::BenchMooncake { transport, smoke } => {
            bench_compare::mooncake::command(&transport, smoke)
        }
        Command::Layering => layering::command(),
        Command::Checks => test_suite::checks_command(),
        Command::TwoHost => two_host::EXCHANGE.command(),
        Command::TwoHostByAddress => two_host_by_address::BY_ADDRESS.command(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn parse(words: &[&str]) -> std::result::Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("xtask").chain(words.iter().copied()))
            .map(|c| c.command)
    }

    fn os(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn bench_compare_may_run_the_ucx_pairs_alone() {
        for words in [
            &["bench", "--compare", "--ucx-only"][..],
            &["bench", "compare", "--ucx-only"],
        ] {
            let Command::Bench { ucx_only, .. } = parse(words).unwrap() else {
                panic!("{words:?}")
            };
            assert!(ucx_only, "{words:?}");
        }
        let Command::Bench { ucx_only, .. } = parse(&["bench", "--compare"]).unwrap() else {
            panic!()
        };
        assert!(!ucx_only);
    }

    #[test]
    fn vm_takes_its_options_then_the_command() {
        let Command::Vm(args) = parse(&[
            "vm",
            "--timeout",
            "20",
            "--mem=1G",
            "-v",
            "--",
            "sh",
            "-c",
            "exit 7",
        ])
        .unwrap() else {
            panic!()
        };
        let options = args.options();
        assert_eq!(options.timeout, Duration::from_secs(20));
        assert_eq!(options.mem, "1G");
        assert!(options.verbose);
        assert_eq!(options.command, os(&["sh", "-c", "exit 7"]));
        let Command::Vm(args) =
            parse(&["vm", "--hosts", "2", "ibv_devinfo", "-d", "rxe0"]).unwrap()
        else {
            panic!()
        };
        let options = args.options();
        assert_eq!(options.hosts, 2);
        assert_eq!(options.command, os(&["ibv_devinfo", "-d", "rxe0"]));
    }

    #[test]
    fn errors_name_the_bad_argument() {
        for (words, bad) in [
            (&["vm", "--timeout", "x", "true"][..], "--timeout"),
            (&["vm", "--mem", "2X", "true"], "--mem"),
            (&["vm", "--hosts", "3", "true"], "--hosts"),
            (&["vm", "--bogus", "true"], "--bogus"),
            (&["vm"], "CMD"),
            (&["demo", "nope"], "nope"),
            (&["bench", "--compare", "barrier"], "--compare"),
            (&["bench", "--compare", "--ucx"], "--ucx"),
            (&["ranks", "0", "p"], "RANKS"),
            (&["nonsense"], "nonsense"),
        ] {
            let error = parse(words).unwrap_err().to_string();
            assert!(error.contains(bad), "{words:?}: {error}");
        }
        assert_eq!(
            parse(&["--help"]).unwrap_err().kind(),
            ErrorKind::DisplayHelp
        );
        assert_eq!(
            parse(&["vm", "--help"]).unwrap_err().kind(),
            ErrorKind::DisplayHelp
        );
    }

    #[test]
    fn test_passes_cargo_and_test_args_through() {
        for (words, want) in [
            (&["test"][..], &[][..]),
            (
                &["test", "--", "--release", "--", "--nocapture"],
                &["--release", "--", "--nocapture"],
            ),
            (&["test", "-p", "ferrovia-mr"], &["-p", "ferrovia-mr"]),
        ] {
            let Command::Test(args) = parse(words).unwrap() else {
                panic!()
            };
            assert_eq!(args.args, os(want), "{words:?}");
        }
    }

    #[test]
    fn hidden_subcommands_round_trip_what_xtask_passes_them() {
        let job = {
            let mut job = ranks::Job::new("/t/ferrovia-rank".into(), 4, os(&["demo", "--x"]));
            job.timeout = Duration::from_secs(77);
            job
        };
        let mut words = vec![OsString::from("xtask"), "ranks".into()];
        words.extend(ranks::to_args(&job));
        let Command::Ranks {
            timeout,
            ranks,
            program,
            args,
        } = Cli::try_parse_from(words).unwrap().command
        else {
            panic!()
        };
        assert_eq!(
            (timeout, usize::from(ranks), program, args),
            (Some(job.timeout), job.ranks, job.program, job.args)
        );
    }

    #[test]
    fn the_vm_sweep_takes_mooncake_s_interpreter_and_output() {
        let words = [
            "bench-compare-sweep",
            "/f",
            "/p",
            "60",
            "--barrier",
            "/r",
            "--mooncake",
            "/v/python",
            "/o",
        ];
        let Command::BenchCompareSweep {
            mooncake,
            barrier,
            transports,
            ..
        } = parse(&words).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            mooncake,
            Some(vec![PathBuf::from("/v/python"), PathBuf::from("/o")])
        );
        assert_eq!(barrier, Some(PathBuf::from("/r")));
        assert!(transports.is_empty());
        let Command::BenchCompareSweep { mooncake, .. } =
            parse(&["bench-compare-sweep", "/f", "/p", "60", "ucx-tcp"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(mooncake, None);
        assert!(parse(&["bench-compare-sweep", "/f", "/p", "60", "--mooncake", "/v"]).is_err());
    }

    #[test]
    fn bench_mooncake_takes_a_transport() {
        for (words, want) in [
            (&["bench-mooncake"][..], ("all", false)),
            (&["bench-mooncake", "tcp", "--smoke"], ("tcp", true)),
        ] {
            let Command::BenchMooncake { transport, smoke } = parse(words).unwrap() else {
                panic!("{words:?}")
            };
            assert_eq!((transport.as_str(), smoke), want);
        }
        assert!(parse(&["bench-mooncake", "udp"]).is_err());
    }

    #[test]
    fn device_tests_get_back_what_the_host_passes() {
        let binaries = vec![
            TestBinary {
                path: "/t/a-1".into(),
                package_dir: "/w/crates/a".into(),
            },
            TestBinary {
                path: "/t/b-2".into(),
                package_dir: "/w/crates/b".into(),
            },
        ];
        let file = PathBuf::from("/w/target/xtask/device-totals-1");
        for (file, want_args) in [(Some(file), os(&["--nocapture"])), (None, vec![])] {
            let mut words = vec![OsString::from("xtask"), "device-tests".into()];
            words.extend(device_tests::to_args(
                file.as_deref(),
                &binaries,
                &want_args,
            ));
            let Command::DeviceTests {
                totals,
                tests,
                test_args,
            } = Cli::try_parse_from(words).unwrap().command
            else {
                panic!()
            };
            assert_eq!(
                (totals, test_binaries(tests), test_args),
                (file, binaries.clone(), want_args)
            );
        }
    }
}
