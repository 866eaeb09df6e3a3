//! `ferrovia-perf -R` against perftest's rdma_cm mode on soft-RoCE, both
//! directions: `ib_write_bw -R` and `ib_send_bw -R` (package perftest,
//! which `cargo xtask deps` installs) as client and as server. On the
//! device's IPv4 address (`SOFTROCE_IP`, which `cargo xtask vm` sets);
//! they fail, never skip, without it.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long any one program may run.
const LIMIT: Duration = Duration::from_secs(90);
const SIZE: &str = "4096";
const ITERS: &str = "500";

fn device_ip() -> String {
    std::env::var("SOFTROCE_IP")
        .expect("SOFTROCE_IP is not set: run the device tests with cargo xtask test (or vm)")
}

fn start(program: &str, args: &[&str]) -> Child {
    Command::new(program)
        .args(args)
        .env("FERROVIA_BACKEND", "verbs")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {program} (perftest installed? cargo xtask deps): {e}")
        })
}

/// Waits up to [`LIMIT`]: whether it succeeded, and its output.
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
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut out);
    }
    let verdict = match status {
        Some(s) => format!("{what} exited {s}"),
        None => format!("{what} ran over {LIMIT:?} and was killed"),
    };
    (
        status.is_some_and(|s| s.success()),
        format!("{verdict}:\n{out}"),
    )
}

/// The results row of a bandwidth report: size and iterations.
fn has_row(out: &str) -> bool {
    out.lines().any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.len() >= 4 && w[0] == SIZE && w[1] == ITERS
    })
}

fn perftest_client(test: &str, port: &str) {
    let ip = device_ip();
    let server = start(
        env!("CARGO_BIN_EXE_ferrovia-perf"),
        &[test, "-R", "-s", SIZE, "-n", ITERS, "-p", port],
    );
    // ferrovia-perf listens at once; perftest's client does not retry.
    std::thread::sleep(Duration::from_secs(2));
    let c_program = format!("ib_{test}");
    let client = start(
        &c_program,
        &["-R", "-s", SIZE, "-n", ITERS, "-p", port, &ip],
    );
    let (c_ok, c) = finish(client, &c_program);
    let (s_ok, s) = finish(server, "ferrovia-perf server");
    assert!(c_ok && s_ok, "{c}\n{s}");
    assert!(has_row(&c), "{c}");
    assert!(s.contains("served"), "{s}");
}

fn perftest_server(test: &str, port: &str) {
    let ip = device_ip();
    let c_program = format!("ib_{test}");
    let server = start(&c_program, &["-R", "-s", SIZE, "-n", ITERS, "-p", port]);
    // ferrovia-perf retries while nothing listens yet.
    let client = start(
        env!("CARGO_BIN_EXE_ferrovia-perf"),
        &[test, "-R", "-s", SIZE, "-n", ITERS, "-p", port, &ip],
    );
    let (c_ok, c) = finish(client, "ferrovia-perf client");
    let (s_ok, s) = finish(server, &c_program);
    assert!(c_ok && s_ok, "{c}\n{s}");
    assert!(has_row(&c), "{c}");
    assert!(s.contains("Data ex. method : rdma_cm"), "{s}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ib_write_bw_client_with_the_ferrovia_perf_server() {
    perftest_client("write_bw", "18531");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ferrovia_perf_client_with_the_ib_write_bw_server() {
    perftest_server("write_bw", "18532");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ib_send_bw_client_with_the_ferrovia_perf_server() {
    perftest_client("send_bw", "18533");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ferrovia_perf_client_with_the_ib_send_bw_server() {
    perftest_server("send_bw", "18534");
}
