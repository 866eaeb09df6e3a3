//! `cargo xtask demo [NAME|all]`: builds and runs one of the project's
//! demonstrations (by default the first of [`DEMOS`], README's main job):
//! on the host (over UCX when it has no RDMA device), or on the host's
//! RDMA device if it has one, else inside the VM.

use std::ffi::OsString;
use std::time::Duration;

use crate::cargo_artifacts::{self, Program, RANK};
use crate::failure::{Failure, Result};
use crate::ranks::{self, Job};
use crate::vm::{self, VmOptions};
use crate::{cmd, deps, rdma_devices, signals, workspace};

/// One demonstration.
#[derive(Debug)]
struct Demo {
    /// `cargo xtask demo NAME`.
    name: &'static str,
    title: &'static str,
    program: Program,
    args: &'static [&'static str],
    /// How many processes: 1 runs the program as is; more run it as the
    /// ranks of one job on one machine (see [`ranks`]).
    ranks: usize,
    /// Where it runs.
    place: Place,
}

/// Where a demo runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// On the host as is (a `Node` picks UCX where there is no device).
    Host,
    /// Needs a verbs device: the host's if it has one, else the VM's.
    RdmaDevice,
    /// Always in the VM, on soft-RoCE.
    Vm,
}

/// The first is the default; add new demos here.
const DEMOS: &[Demo] = &[
    Demo {
        name: "node",
        title: "a 4-rank ferrovia Node job: rendezvous, send/recv, RDMA write and read, barriers",
        program: RANK,
        args: &["demo"],
        ranks: 4,
        place: Place::Host,
    },
    Demo {
        name: "node-softroce",
        title: "the same 4-rank job over verbs on soft-RoCE in the VM",
        program: RANK,
        args: &["demo"],
        ranks: 4,
        place: Place::Vm,
    },
    Demo {
        name: "pingpong",
        title: "RC ping-pong over ibverbs (device from FERROVIA_DEVICE or the first one)",
        program: Program::Example {
            package: "ferrovia-verbs",
            name: "rc_pingpong",
        },
        args: &[],
        ranks: 1,
        place: Place::RdmaDevice,
    },
];

/// A multi-rank demo in the VM: the whole job, boot not included.
const RANKS_TIMEOUT: Duration = Duration::from_secs(600);
/// The VM run of a demo, boot retries included.
const VM_TIMEOUT: Duration = Duration::from_secs(900);

/// The default demo, README's main job (the first of [`DEMOS`]).
pub(crate) const DEFAULT: &str = "node";

/// What `cargo xtask demo` accepts: a demo's name, or `all`.
pub(crate) fn names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(DEMOS.iter().map(|d| d.name).chain(["all"]))
}

/// `cargo xtask demo NAME` (a name [`names`] accepts).
pub(crate) fn command(name: &str) -> Result<u8> {
    let demos: Vec<&Demo> = DEMOS
        .iter()
        .filter(|d| name == "all" || name == d.name)
        .collect();
    workspace::enter_root()?;
    deps::ensure(deps::ALL)?;
    for demo in demos {
        say!("xtask demo: {}", demo.title);
        let status = run_demo(demo)?;
        if status != 0 {
            return Err(Failure::with_status(
                format!("demo {} failed", demo.name),
                status,
            ));
        }
    }
    Ok(0)
}

fn run_demo(demo: &Demo) -> Result<u8> {
    let program = cargo_artifacts::build_program(demo.program, false)?;
    let args: Vec<OsString> = demo.args.iter().map(OsString::from).collect();
    let here = match demo.place {
        Place::Host => true,
        Place::RdmaDevice => !rdma_devices::host_devices().is_empty(),
        Place::Vm => false,
    };
    if demo.ranks > 1 {
        let mut job = Job::new(program, demo.ranks, args);
        job.timeout = RANKS_TIMEOUT;
        // Overrides the one `ranks` derives from the time and xtask's pid:
        // a stranger on this host must not be able to guess it.
        job.env.push(("FERROVIA_JOB_TOKEN".into(), random_token()?));
        if here {
            say!(
                "xtask demo: {} ranks of {} on this host",
                demo.ranks,
                demo.program.name()
            );
            signals::catch_termination();
            return ranks::run(&job)?.verdict().map(|()| 0);
        }
        say!(
            "xtask demo: running {} ranks of {} in one VM on soft-RoCE (cargo xtask vm)",
            demo.ranks,
            demo.program.name()
        );
        let mut command = vec![cmd::xtask_exe()?, "ranks".into()];
        command.extend(ranks::to_args(&job));
        return vm::run(&vm_options(command));
    }
    if here {
        let status = std::process::Command::new(&program)
            .args(&args)
            .status()
            .map_err(|e| Failure::new(format!("cannot run {}: {e}", program.display())))?;
        return Ok(status.code().map_or(1, |c| c as u8));
    }
    say!("xtask demo: no RDMA device on this host: running it in a VM (cargo xtask vm)");
    let mut command = vec![program.into_os_string()];
    command.extend(args);
    vm::run(&vm_options(command))
}

/// 128 random bits in hex, from the kernel's generator.
fn random_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(|e| Failure::new(format!("cannot read /dev/urandom for a job token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn vm_options(command: Vec<OsString>) -> VmOptions {
    let mut options = VmOptions::new(command);
    options.timeout = VM_TIMEOUT;
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_demo_is_the_default_and_pingpong_stays() {
        assert_eq!(DEMOS[0].name, DEFAULT);
        assert_eq!(DEMOS[0].place, Place::Host, "the main job needs no VM");
        use clap::builder::TypedValueParser;
        let names: Vec<String> = names()
            .possible_values()
            .unwrap()
            .map(|v| v.get_name().to_string())
            .collect();
        assert_eq!(names, ["node", "node-softroce", "pingpong", "all"]);
    }

    #[test]
    fn demo_names_are_unique() {
        for (i, demo) in DEMOS.iter().enumerate() {
            assert!(DEMOS[..i].iter().all(|d| d.name != demo.name));
            assert!(demo.ranks >= 1);
        }
    }

    #[test]
    fn demo_tokens_are_random() {
        let (a, b) = (random_token().unwrap(), random_token().unwrap());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
