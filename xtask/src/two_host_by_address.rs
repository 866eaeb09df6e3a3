//! The two-host connection-by-address test, after the two-host RoCE test
//! in `cargo xtask test`: the `accept_clients` example listens in one VM
//! (`serve`) and connects from the other (`connect`), over the virtual
//! wire of `cargo xtask vm --hosts 2`, on verbs: the RDMA connection
//! manager between two soft-RoCE devices, private data both ways, an RDMA
//! write and messages. It counts as one test. Skipped with the two-host
//! test (a host with its own RDMA device).
//!
//! `xtask two-host-by-address` (hidden) builds the example and runs the
//! step alone.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use crate::cargo_artifacts::{self, Program};
use crate::failure::{Failure, Result};
use crate::libtest::Tally;
use crate::vm::{self, VmOptions};
use crate::{deps, two_host, workspace};

/// The step's title in `cargo xtask test`.
pub(crate) const TITLE: &str =
    "two-host connection by address: accept_clients serve / connect in two VMs";
/// The program each guest runs.
pub(crate) const EXAMPLE: Program = Program::Example {
    package: "ferrovia",
    name: "accept_clients",
};
/// Guest 0's address on the wire (guest 0 is .1) and a port.
const LISTEN: &str = "192.168.78.1:7471";
/// The whole run: pair boot (~10 s) and the connection, with room for a
/// loaded host.
const TIMEOUT: Duration = Duration::from_secs(600);

/// What each guest runs: guest 0 serves one client, guest 1 connects (the
/// example retries while nothing listens yet).
fn guest_command(program: &Path) -> Vec<OsString> {
    let script = format!(
        r#"if [ "$FERROVIA_HOST_INDEX" = 0 ]; then exec "$0" serve {LISTEN} 1; else exec "$0" connect {LISTEN} "host-$FERROVIA_HOST_INDEX"; fi"#
    );
    let mut command: Vec<OsString> = ["env", "FERROVIA_BACKEND=verbs", "sh", "-c"]
        .iter()
        .map(OsString::from)
        .collect();
    command.push(script.into());
    command.push(program.into());
    command
}

/// Runs the test with `program` (`accept_clients`; `None`: it was not
/// built). Returns one passed or one failed test with the verdict.
pub(crate) fn run(program: Option<&Path>) -> (Tally, Result<()>) {
    let result = run_pair(program);
    let tally = Tally {
        passed: u64::from(result.is_ok()),
        failed: u64::from(result.is_err()),
        ignored: 0,
    };
    (tally, result)
}

fn run_pair(program: Option<&Path>) -> Result<()> {
    let program = program.filter(|p| p.is_file()).ok_or_else(|| {
        Failure::new(format!(
            "the two-host connection-by-address test needs the accept_clients example, which \
             `cargo test --no-run` did not build (missing {}; it comes with package ferrovia)",
            program.map_or_else(
                || "target/debug/examples/accept_clients".into(),
                |p| p.display().to_string()
            )
        ))
    })?;
    let mut options = VmOptions::new(guest_command(program));
    options.hosts = 2;
    options.timeout = TIMEOUT;
    match vm::run(&options) {
        Ok(0) => Ok(()),
        Ok(status) => Err(Failure::with_status(
            format!("two-host connection by address failed: accept_clients exited {status}"),
            status,
        )),
        Err(failure) => Err(failure.context("two-host connection by address")),
    }
}

/// `xtask two-host-by-address` (hidden): builds the example and runs the
/// test.
pub(crate) fn command() -> Result<u8> {
    workspace::enter_root()?;
    deps::ensure(deps::ALL)?;
    if let Some(reason) = two_host::skip_reason() {
        say!("xtask two-host-by-address: {reason}");
        return Ok(0);
    }
    let program = cargo_artifacts::build_program(EXAMPLE, false)?;
    say!("xtask two-host-by-address: {TITLE}");
    let (_, result) = run(Some(&program));
    result?;
    say!("xtask two-host-by-address: 1 passed");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_0_serves_and_guest_1_connects_to_it() {
        let command = guest_command(Path::new("/w/target/debug/examples/accept_clients"));
        let words: Vec<&str> = command.iter().map(|w| w.to_str().unwrap()).collect();
        assert_eq!(words[..4], ["env", "FERROVIA_BACKEND=verbs", "sh", "-c"]);
        assert_eq!(words[5], "/w/target/debug/examples/accept_clients");
        for (index, expect) in [
            ("0", "serve 192.168.78.1:7471 1"),
            ("1", "connect 192.168.78.1:7471 host-1"),
        ] {
            // The script, with `$0` an echo of its arguments.
            let out = std::process::Command::new("sh")
                .args(["-c", words[4], "/bin/echo"])
                .env("FERROVIA_HOST_INDEX", index)
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), expect);
        }
    }

    #[test]
    fn a_missing_program_is_one_failed_test() {
        let (tally, result) = run(Some(Path::new("/nonexistent/accept_clients")));
        assert_eq!((tally.passed, tally.failed), (0, 1));
        let message = result.unwrap_err().to_string();
        assert!(message.contains("/nonexistent/accept_clients"), "{message}");
        let (tally, _) = run(None);
        assert_eq!(tally.failed, 1);
    }
}
