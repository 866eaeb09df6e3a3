//! `cargo xtask demo`: builds and runs the project's demonstrations, on the
//! host's RDMA device if it has one, else inside the VM.

use std::ffi::OsString;

use crate::failure::{Failure, Result};
use crate::vm::{self, VmOptions};
use crate::{cargo_artifacts, cmd, deps, rdma_devices, workspace};

/// One demonstration: an example program of a workspace package.
struct Demo {
    title: &'static str,
    package: &'static str,
    example: &'static str,
    args: &'static [&'static str],
    /// Needs a verbs device (else it runs on the host as is).
    needs_rdma: bool,
}

/// Run in this order; add new demos here.
const DEMOS: &[Demo] = &[Demo {
    title: "RC ping-pong over ibverbs (device from FERROVIA_DEVICE or the first one)",
    package: "ferrovia-verbs",
    example: "rc_pingpong",
    args: &[],
    needs_rdma: true,
}];

/// `cargo xtask demo`.
pub(crate) fn command(args: &[OsString]) -> Result<u8> {
    if !args.is_empty() {
        return Err(Failure::with_status("usage: cargo xtask demo", 2));
    }
    workspace::enter_root()?;
    deps::ensure(deps::ALL)?;
    for demo in DEMOS {
        say!("xtask demo: {}", demo.title);
        let status = run_demo(demo)?;
        if status != 0 {
            return Err(Failure::with_status(
                format!("demo {} failed", demo.example),
                status,
            ));
        }
    }
    Ok(0)
}

fn run_demo(demo: &Demo) -> Result<u8> {
    let mut build = cmd::cargo();
    build.args([
        "build",
        "-p",
        demo.package,
        "--example",
        demo.example,
        "--message-format=json",
    ]);
    let program = cargo_artifacts::build(&mut build)?
        .into_iter()
        .find(|e| e.target_name == demo.example && e.kinds.iter().any(|k| k == "example"))
        .ok_or_else(|| {
            Failure::new(format!(
                "cargo built no example {} in {}",
                demo.example, demo.package
            ))
        })?
        .path;
    let mut command = vec![program.into_os_string()];
    command.extend(demo.args.iter().map(OsString::from));
    if !demo.needs_rdma || !rdma_devices::host_devices().is_empty() {
        let status = std::process::Command::new(&command[0])
            .args(&command[1..])
            .status()
            .map_err(|e| Failure::new(format!("cannot run {}: {e}", demo.example)))?;
        return Ok(status.code().map_or(1, |c| c as u8));
    }
    say!("xtask demo: no RDMA device on this host: running it in a VM (cargo xtask vm)");
    vm::run(&VmOptions::new(command))
}
