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

use crate::cargo_artifacts::Program;
use crate::two_host::PairTest;

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

/// The test, run like the two-host RoCE test.
pub(crate) const BY_ADDRESS: PairTest = PairTest {
    name: "two-host connection by address",
    title: TITLE,
    program: EXAMPLE,
    subcommand: "two-host-by-address",
    guest_command,
    timeout: TIMEOUT,
};

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
        let (tally, result) = BY_ADDRESS.run(Some(Path::new("/nonexistent/accept_clients")));
        assert_eq!((tally.passed, tally.failed), (0, 1));
        let message = result.unwrap_err().to_string();
        assert!(message.contains("/nonexistent/accept_clients"), "{message}");
        let (tally, _) = BY_ADDRESS.run(None);
        assert_eq!(tally.failed, 1);
    }
}
