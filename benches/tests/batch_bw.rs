//! `ferrovia-perf batch_bw` runs end to end: a server and a client over
//! two rails, and the client's row names the entries, size and rails with
//! positive figures (the figures themselves are for docs/benchmarks.md).

mod common;

use common::{finish, start_with};

const PERF: &str = env!("CARGO_BIN_EXE_ferrovia-perf");

fn batch_bw(rails: &str, port: &str, env: &[(&str, &str)]) {
    let args = [
        "batch_bw",
        "-s",
        "4096",
        "--entries",
        "2000",
        "-n",
        "3",
        "--rails",
        rails,
        "-p",
        port,
    ];
    let server = start_with(PERF, &args, env);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut client_args = args.to_vec();
    client_args.push("127.0.0.1");
    let client = start_with(PERF, &client_args, env);
    let (client_ok, out) = finish(client, "ferrovia-perf batch_bw client");
    let (server_ok, server_out) = finish(server, "ferrovia-perf batch_bw server");
    assert!(client_ok && server_ok, "{out}\n{server_out}");
    let rails_n = rails.split(',').count().max(rails.parse().unwrap_or(0));
    let row: Vec<f64> = out
        .lines()
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect::<Vec<f64>>()
        })
        .find(|w| w.len() == 7)
        .unwrap_or_else(|| panic!("no results row: {out}"));
    assert_eq!(&row[..4], &[2000.0, 4096.0, rails_n as f64, 3.0], "{out}");
    assert!(row[4..].iter().all(|&x| x > 0.0), "{out}");
}

#[test]
fn batch_bw_over_two_ucx_tcp_rails() {
    batch_bw(
        "2",
        "18541",
        &[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")],
    );
}

#[test]
#[ignore = "needs two RDMA devices: cargo xtask test"]
fn batch_bw_over_both_devices() {
    let rails = format!(
        "{},{}",
        std::env::var("FERROVIA_DEVICE").unwrap_or_else(|_| "rxe0".into()),
        std::env::var("SOFTROCE_DEV1").expect("SOFTROCE_DEV1: the VM's second rail")
    );
    batch_bw(&rails, "18542", &[("FERROVIA_BACKEND", "verbs")]);
}
