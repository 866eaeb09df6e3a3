//! The two-host RoCE test, the last step of `cargo xtask test`:
//! `ferrovia-rank exchange 5` as rank 0 and rank 1 in two VMs joined by a
//! virtual wire (`cargo xtask vm --hosts 2`), so that the two ranks talk
//! through two separate soft-RoCE devices, as on two machines. It counts as
//! one test. A host with an RDMA device of its own skips it (its device
//! tests run without a VM, and a second machine is not at hand).
//!
//! `xtask two-host` (hidden) builds `ferrovia-rank` and runs the step alone.
//! [`PairTest`] is the part every two-VM test shares.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use crate::cargo_artifacts::{self, Program, RANK};
use crate::failure::{Failure, Result};
use crate::libtest::Tally;
use crate::vm::{self, VmOptions};
use crate::{deps, rdma_devices, workspace};

/// The step's title in `cargo xtask test`.
pub(crate) const TITLE: &str = "two-host RoCE test: ferrovia-rank exchange 5 in two VMs";
/// Rank 0's address on the wire of `vm --hosts 2` (guest 0 is .1) and a
/// port; each guest has a network of its own, so any port is free.
const RENDEZVOUS: &str = "192.168.78.1:29500";
/// Iterations of the exchange.
const ITERS: &str = "5";
/// The whole run: pair boot (~10 s), rendezvous and the exchange, with room
/// for a loaded host.
const TIMEOUT: Duration = Duration::from_secs(600);

/// Why the step is skipped on this host, if it is.
pub(crate) fn skip_reason() -> Option<String> {
    rdma_devices::host_devices().first().map(|device| {
        format!(
            "host RDMA device {device}: skipping the two-host test (it needs the VM pair, \
             which runs only on hosts without RDMA)"
        )
    })
}

/// What each guest runs: its `FERROVIA_HOST_INDEX` (0 or 1) is its rank.
fn guest_command(program: &Path) -> Vec<OsString> {
    let mut command: Vec<OsString> = [
        "env",
        "-u",
        "FERROVIA_HOSTFILE",
        "FERROVIA_WORLD_SIZE=2",
        &format!("FERROVIA_RENDEZVOUS={RENDEZVOUS}"),
        "FERROVIA_JOB_TOKEN=xtask-two-host",
        "sh",
        "-c",
        r#"FERROVIA_RANK="$FERROVIA_HOST_INDEX" exec "$0" "$@""#,
    ]
    .iter()
    .map(OsString::from)
    .collect();
    command.push(program.into());
    command.extend(["exchange", ITERS].map(OsString::from));
    command
}

/// A test that runs one program in each of two VMs joined by a wire.
pub(crate) struct PairTest {
    /// What failures call it.
    pub(crate) name: &'static str,
    /// The step's title in `cargo xtask test`.
    pub(crate) title: &'static str,
    /// The program, which `cargo test --no-run` builds.
    pub(crate) program: Program,
    /// The hidden `xtask` subcommand that runs it alone.
    pub(crate) subcommand: &'static str,
    /// What each guest runs, given the program's path.
    pub(crate) guest_command: fn(&Path) -> Vec<OsString>,
    /// The whole run, pair boot included.
    pub(crate) timeout: Duration,
}

/// This module's test: `ferrovia-rank exchange` as two ranks.
pub(crate) const EXCHANGE: PairTest = PairTest {
    name: "two-host RoCE test",
    title: TITLE,
    program: RANK,
    subcommand: "two-host",
    guest_command,
    timeout: TIMEOUT,
};

impl PairTest {
    /// Runs the test with `program` (`None`: it was not built). Returns
    /// one passed or one failed test with the verdict.
    pub(crate) fn run(&self, program: Option<&Path>) -> (Tally, Result<()>) {
        let result = self.run_pair(program);
        let tally = Tally {
            passed: u64::from(result.is_ok()),
            failed: u64::from(result.is_err()),
            ignored: 0,
        };
        (tally, result)
    }

    fn run_pair(&self, program: Option<&Path>) -> Result<()> {
        let program = program.filter(|p| p.is_file()).ok_or_else(|| {
            Failure::new(format!(
                "the {} needs {}, which `cargo test --no-run` did not build ({}; it comes \
                 with package {})",
                self.name,
                self.program.name(),
                program.map_or_else(
                    || "not among the artifacts".into(),
                    |p| format!("missing {}", p.display())
                ),
                self.program.package(),
            ))
        })?;
        let mut options = VmOptions::new((self.guest_command)(program));
        options.hosts = 2;
        options.timeout = self.timeout;
        match vm::run(&options) {
            Ok(0) => Ok(()),
            Ok(status) => Err(Failure::with_status(
                format!(
                    "{} failed: {} exited {status}",
                    self.name,
                    self.program.name()
                ),
                status,
            )),
            Err(failure) => Err(failure.context(self.name)),
        }
    }

    /// `xtask SUBCOMMAND` (hidden): builds the program and runs the test.
    pub(crate) fn command(&self) -> Result<u8> {
        let sub = self.subcommand;
        workspace::enter_root()?;
        deps::ensure(deps::ALL)?;
        if let Some(reason) = skip_reason() {
            say!("xtask {sub}: {reason}");
            return Ok(0);
        }
        let program = cargo_artifacts::build_program(self.program, false)?;
        say!("xtask {sub}: {}", self.title);
        let (_, result) = self.run(Some(&program));
        result?;
        say!("xtask {sub}: 1 passed");
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_guest_runs_its_own_rank() {
        let command = guest_command(Path::new("/w/target/debug/ferrovia-rank"));
        let words: Vec<&str> = command.iter().map(|w| w.to_str().unwrap()).collect();
        assert_eq!(
            words,
            [
                "env",
                "-u",
                "FERROVIA_HOSTFILE",
                "FERROVIA_WORLD_SIZE=2",
                "FERROVIA_RENDEZVOUS=192.168.78.1:29500",
                "FERROVIA_JOB_TOKEN=xtask-two-host",
                "sh",
                "-c",
                r#"FERROVIA_RANK="$FERROVIA_HOST_INDEX" exec "$0" "$@""#,
                "/w/target/debug/ferrovia-rank",
                "exchange",
                "5",
            ]
        );
        // The script really makes the host index the rank.
        let out = std::process::Command::new("sh")
            .args(&command[7..9])
            .args(["/bin/sh", "-c", r#"echo "$FERROVIA_RANK $1""#, "x", "y"])
            .env("FERROVIA_HOST_INDEX", "1")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "1 y\n");
    }

    #[test]
    fn a_missing_program_is_one_failed_test() {
        let (tally, result) = EXCHANGE.run(Some(Path::new("/nonexistent/ferrovia-rank")));
        assert_eq!((tally.passed, tally.failed), (0, 1));
        let message = result.unwrap_err().to_string();
        assert!(message.contains("/nonexistent/ferrovia-rank"), "{message}");
        let (tally, result) = EXCHANGE.run(None);
        assert!(result.unwrap_err().to_string().contains("ferrovia-testkit"));
        assert_eq!(tally.failed, 1);
    }
}
