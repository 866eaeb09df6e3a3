//! Interop with C peers of the RDMA connection manager on soft-RoCE, each
//! direction with ferrovia's side an example a user can run: rdma-core's
//! `rdma_server` / `rdma_client` against `examples/rdma_message.rs`, and
//! `rping` against `examples/rping.rs` (package rdmacm-utils, which
//! `cargo xtask deps` installs). On the device's IPv4 address
//! (`SOFTROCE_IP`, which `cargo xtask vm` sets); they fail, never skip,
//! without it.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long any one program may run.
const LIMIT: Duration = Duration::from_secs(60);

fn device_ip() -> String {
    std::env::var("SOFTROCE_IP")
        .expect("SOFTROCE_IP is not set: run the device tests with cargo xtask test (or vm)")
}

/// `target/<profile>/examples/NAME` (cargo builds the examples for
/// `cargo test`).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .join("examples")
        .join(name)
}

/// Starts `program` with its output captured.
fn start(program: impl Into<PathBuf>, args: &[&str]) -> Child {
    let program = program.into();
    Command::new(&program)
        .args(args)
        .env("FERROVIA_BACKEND", "verbs")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {} (rdmacm-utils installed? cargo xtask deps): {e}",
                program.display()
            )
        })
}

/// Starts a ferrovia example that serves, and waits for its
/// `NAME: listening on ADDR` line.
fn start_server(name: &str, args: &[&str]) -> Child {
    let mut child = start(example(name), args);
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped stdout");
    let mut reader = BufReader::new(stdout);
    reader
        .read_line(&mut line)
        .expect("read the server's output");
    assert!(
        line.contains("listening on"),
        "{name} did not start listening: {line:?}"
    );
    // The rest of its output, for the verdict.
    child.stdout = Some(reader.into_inner());
    child
}

/// Waits up to [`LIMIT`] for `child`: whether it succeeded, and its
/// output. A program over its time is killed and fails.
fn finish(mut child: Child, what: &str) -> (bool, String) {
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    for stream in [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn Read>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut s = stream;
        let _ = s.read_to_string(&mut out);
    }
    let ok = status.is_some_and(|s| s.success());
    let verdict = match status {
        Some(s) => format!("{what} exited {s}"),
        None => format!("{what} ran over {LIMIT:?} and was killed"),
    };
    (ok, format!("{verdict}:\n{out}"))
}

/// Both programs succeeded; their outputs.
fn both(a: (bool, String), b: (bool, String)) -> (String, String) {
    assert!(a.0 && b.0, "{}\n{}", a.1, b.1);
    (a.1, b.1)
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ferrovia_serves_the_c_rdma_client() {
    let ip = device_ip();
    let server = start_server("rdma_message", &["server", &format!("{ip}:7481")]);
    let client = start("rdma_client", &["-s", &ip, "-p", "7481"]);
    let (c, s) = both(
        finish(client, "rdma_client"),
        finish(server, "rdma_message server"),
    );
    assert!(c.contains("rdma_client: end 0"), "{c}");
    assert!(s.contains("server got 16 bytes"), "{s}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ferrovia_connects_to_the_c_rdma_server() {
    let ip = device_ip();
    // rdma_server binds every address; the client retries until it listens.
    let server = start("rdma_server", &["-p", "7482"]);
    let client = start(example("rdma_message"), &["client", &format!("{ip}:7482")]);
    let (c, s) = both(
        finish(client, "rdma_message client"),
        finish(server, "rdma_server"),
    );
    assert!(c.contains("got 16 back"), "{c}");
    assert!(s.contains("rdma_server: end 0"), "{s}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ferrovia_serves_the_c_rping_client_which_validates_every_ping() {
    let ip = device_ip();
    let server = start_server("rping", &["server", &format!("{ip}:7483")]);
    // -V: the C client checks that each ping came back unchanged.
    let client = start(
        "rping",
        &[
            "-c", "-a", &ip, "-p", "7483", "-C", "10", "-S", "100", "-V", "-v",
        ],
    );
    let (c, s) = both(finish(client, "rping -c"), finish(server, "rping server"));
    assert_eq!(c.matches("ping data: rdma-ping-").count(), 10, "{c}");
    assert!(!c.contains("data mismatch"), "{c}");
    assert!(s.contains("served 10 pings"), "{s}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ferrovia_pings_the_c_rping_server() {
    let ip = device_ip();
    // rping's server reads into a buffer of its own -S: as large as the
    // client's pings.
    let server = start("rping", &["-s", "-a", &ip, "-p", "7484", "-S", "100", "-v"]);
    let client = start(
        example("rping"),
        &["client", &format!("{ip}:7484"), "10", "100"],
    );
    let (c, s) = both(finish(client, "rping client"), finish(server, "rping -s"));
    assert!(c.contains("sent 10 pings of 100 bytes"), "{c}");
    // The C server read each ping (and printed it) before writing it back.
    assert_eq!(s.matches("server ping data: rdma-ping-").count(), 10, "{s}");
}
