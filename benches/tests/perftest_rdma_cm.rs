//! `ferrovia-perf -R` against perftest's rdma_cm mode on soft-RoCE, both
//! directions: `ib_write_bw -R` and `ib_send_bw -R` (package perftest,
//! which `cargo xtask deps` installs) as client and as server. On the
//! device's IPv4 address (`SOFTROCE_IP`, which `cargo xtask vm` sets);
//! they fail, never skip, without it.

mod common;

use common::{finish, start, wait_for_line};

const SIZE: &str = "4096";
const ITERS: &str = "500";

fn device_ip() -> String {
    std::env::var("SOFTROCE_IP")
        .expect("SOFTROCE_IP is not set: run the device tests with cargo xtask test (or vm)")
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
    let mut server = start(
        env!("CARGO_BIN_EXE_ferrovia-perf"),
        &[test, "-R", "-s", SIZE, "-n", ITERS, "-p", port],
    );
    // perftest's client does not retry: start it once the server listens
    // (a 2 s sleep was too short in the emulated VM: the client was
    // rejected, RDMA_CM_EVENT_REJECTED, with nothing listening yet).
    let (listening, server_out) = wait_for_line(&mut server, "listening on");
    let c_program = format!("ib_{test}");
    let client = listening.then(|| {
        start(
            &c_program,
            &["-R", "-s", SIZE, "-n", ITERS, "-p", port, &ip],
        )
    });
    let (c_ok, c) = client.map_or((false, String::new()), |c| finish(c, &c_program));
    let (s_ok, s_err) = finish(server, "ferrovia-perf server");
    let s = format!("{}{s_err}", server_out.join().unwrap_or_default());
    assert!(listening, "ferrovia-perf never said it listens:\n{s}");
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
