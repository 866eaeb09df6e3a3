//! `cargo xtask`: ferrovia's project automation. Subcommands: `deps`,
//! `softroce`, `vm`, `test`, `ci`, `demo`, `bench` (see `cargo xtask
//! --help`, and [`cli`] for the command line).
//! Its dependencies are pure-Rust crates, so it builds before `cargo
//! xtask deps` has installed the RDMA and UCX packages.

#[macro_use]
mod out;

mod bench;
mod bench_bootstrap;
mod bench_compare;
mod cargo_artifacts;
mod cli;
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
mod soak;
mod softroce;
mod test_suite;
#[cfg(test)]
mod tidy;
mod two_host;
mod two_host_by_address;
mod vm;
mod without_rdma_core;
mod workspace;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Exits by itself on --help (0) and on a bad argument (2, naming it).
    let cli = cli::Cli::parse();
    // Parsed: the first argument is the subcommand (there are no global
    // options), which prefixes failures (`xtask test: ...`).
    let name = std::env::args().nth(1).unwrap_or_default();
    match cli::run(cli) {
        Ok(status) => ExitCode::from(status),
        Err(failure) => {
            if !failure.is_reported() {
                eprintln!("xtask {name}: {failure}");
            }
            ExitCode::from(failure.status())
        }
    }
}
