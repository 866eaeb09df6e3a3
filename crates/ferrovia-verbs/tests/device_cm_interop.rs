//! Interoperability with C peers over the connection manager: the
//! `cm_server`, `cm_client` and `cm_rping` examples against rdmacm-utils'
//! `rdma_server`, `rdma_client` and `rping`, both directions, on a real
//! (soft-)RoCE device. Run by `cargo xtask test`; ignored under plain
//! `cargo test`. A missing program fails the test: it is never skipped.

mod common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Per program: generous, everything runs under TCG in the VM.
const RUN: Duration = Duration::from_secs(90);
/// Pings per rping run.
const PINGS: u32 = 10;

/// A C program of rdmacm-utils, from `PATH`.
fn c_program(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} is not installed (rdmacm-utils; `cargo xtask deps` installs it)")
        })
}

/// An example of this crate, built by `cargo test` next to the tests.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo test -p ferrovia-verbs --no-run`",
        path.display()
    );
    path
}

/// A running program whose output is collected as it comes.
struct Run {
    name: String,
    child: Child,
    out: thread::JoinHandle<String>,
    err: thread::JoinHandle<String>,
}

/// What a program printed and how it ended.
struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

fn collect(mut r: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

impl Run {
    fn start(program: PathBuf, args: &[&str]) -> Run {
        let name = program.file_name().unwrap().to_string_lossy().into_owned();
        let mut child = Command::new(&program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        let out = collect(child.stdout.take().unwrap());
        let err = collect(child.stderr.take().unwrap());
        Run {
            name,
            child,
            out,
            err,
        }
    }

    /// Waits up to [`RUN`]; a program still running then is killed and the
    /// test fails.
    fn finish(mut self) -> Finished {
        let deadline = Instant::now() + RUN;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{} did not finish within {RUN:?}; stdout: {}; stderr: {}",
                    self.name,
                    self.out.join().unwrap(),
                    self.err.join().unwrap()
                );
            }
            thread::sleep(Duration::from_millis(20));
        };
        Finished {
            status,
            stdout: self.out.join().unwrap(),
            stderr: self.err.join().unwrap(),
        }
    }

    /// Finishes and asserts a zero exit status.
    fn succeed(self) -> Finished {
        let name = self.name.clone();
        let f = self.finish();
        assert!(
            f.status.success(),
            "{name} failed ({}); stdout: {}; stderr: {}",
            f.status,
            f.stdout,
            f.stderr
        );
        f
    }
}

/// Waits until `comm` listens on `port` (the kernel's list of connection
/// manager ids, `rdma resource show cm_id`), so its client never races
/// its listen.
fn wait_listening(server: &mut Run, port: u16) {
    let deadline = Instant::now() + RUN;
    let comm: String = server.name.chars().take(15).collect();
    loop {
        let out = Command::new("rdma")
            .args(["resource", "show", "cm_id"])
            .output()
            .expect("the `rdma` tool (iproute2) lists connection manager ids");
        let listing = String::from_utf8_lossy(&out.stdout);
        if listing.lines().any(|l| {
            l.contains("state LISTEN")
                && l.contains(&format!("comm {comm} "))
                && l.contains(&format!(":{port} "))
        }) {
            return;
        }
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!("{} exited ({status}) before listening", server.name);
        }
        assert!(
            Instant::now() < deadline,
            "{} is not listening on port {port}: {listing}",
            server.name
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// The ping data rping's client sends for ping `n` (64 bytes), as text.
fn ping_text(n: u32) -> String {
    let mut s = format!("rdma-ping-{n}: ");
    let mut c = b'A' + (n % 58) as u8;
    while s.len() < 63 {
        s.push(c as char);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    s
}

fn ip() -> String {
    common::ipv4().to_string()
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn c_rdma_client_with_the_ferrovia_server() {
    let port = "17471";
    let mut server = Run::start(example("cm_server"), &["-p", port, "-n", "1", "-t", "60"]);
    wait_listening(&mut server, 17471);
    let client = Run::start(c_program("rdma_client"), &["-s", &ip(), "-p", port]).succeed();
    let server = server.succeed();
    assert!(
        client.stdout.contains("rdma_client: end 0"),
        "{}",
        client.stdout
    );
    assert!(
        server.stdout.contains("received 16 bytes") && server.stdout.contains("disconnected"),
        "{}",
        server.stdout
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ferrovia_client_with_the_c_rdma_server() {
    let port = "17472";
    let mut server = Run::start(c_program("rdma_server"), &["-p", port]);
    wait_listening(&mut server, 17472);
    let client = Run::start(example("cm_client"), &["-s", &ip(), "-p", port, "-t", "60"]).succeed();
    let server = server.succeed();
    assert!(
        server.stdout.contains("rdma_server: end 0"),
        "{}",
        server.stdout
    );
    assert!(
        client.stdout.contains("received 16 bytes"),
        "{}",
        client.stdout
    );
}

/// C `rping -c` (with `extra` options) against `cm_rping -s`.
fn c_rping_client(port: u16, extra: &[&str]) {
    let p = port.to_string();
    let count = PINGS.to_string();
    let mut server = Run::start(
        example("cm_rping"),
        &["-s", "-v", "-p", &p, "-C", &count, "-t", "60"],
    );
    wait_listening(&mut server, port);
    let ip = ip();
    let mut args = vec!["-c", "-a", &ip, "-p", &p, "-C", &count, "-v", "-V"];
    args.extend_from_slice(extra);
    let client = Run::start(c_program("rping"), &args).succeed();
    let server = server.succeed();
    for n in 0..PINGS {
        let line = format!("ping data: {}", ping_text(n));
        assert!(
            client.stdout.contains(&line),
            "C client: no {line:?}: {}",
            client.stdout
        );
        let line = format!("server ping data: {}", ping_text(n));
        assert!(
            server.stdout.contains(&line),
            "ferrovia server: no {line:?}: {}",
            server.stdout
        );
    }
    assert!(
        server
            .stdout
            .contains(&format!("server: {PINGS} pings from")),
        "{}",
        server.stdout
    );
}

/// `cm_rping -c` against C `rping -s` (with `extra` options).
fn c_rping_server(port: u16, extra: &[&str]) {
    let p = port.to_string();
    let count = PINGS.to_string();
    let ip = ip();
    let mut args = vec!["-s", "-v", "-a", &ip, "-p", &p];
    args.extend_from_slice(extra);
    let mut server = Run::start(c_program("rping"), &args);
    wait_listening(&mut server, port);
    let client = Run::start(
        example("cm_rping"),
        &["-c", "-a", &ip, "-p", &p, "-C", &count, "-v", "-t", "60"],
    )
    .succeed();
    let server = server.succeed();
    for n in 0..PINGS {
        let line = format!("server ping data: {}", ping_text(n));
        assert!(
            server.stdout.contains(&line),
            "C server: no {line:?}: {}",
            server.stdout
        );
        let line = format!("ping data: {}", ping_text(n));
        assert!(
            client.stdout.contains(&line),
            "ferrovia client: no {line:?}: {}",
            client.stdout
        );
    }
    assert!(
        client.stdout.contains(&format!("client: {PINGS} pings to")),
        "{}",
        client.stdout
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn c_rping_client_with_the_ferrovia_rping_server() {
    // The C client's QP made by librdmacm, then by rping itself (-q).
    c_rping_client(17174, &[]);
    c_rping_client(17176, &["-q"]);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ferrovia_rping_client_with_the_c_rping_server() {
    c_rping_server(17175, &[]);
    c_rping_server(17177, &["-q"]);
}
