//! `ferrovia-perf --json`: one JSON object per result on stdout, with the
//! text table's columns, and nothing else there (the other lines go to
//! stderr), so a user's plots can read it. Over UCX on tcp, any host.

mod common;

use common::{finish, start_with};

const PERF: &str = env!("CARGO_BIN_EXE_ferrovia-perf");
const UCX_TCP: &[(&str, &str)] = &[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")];

/// Runs `args` as server and client on `port`: the client's stdout.
fn pair(args: &[&str], port: &str) -> String {
    let mut server_args = args.to_vec();
    server_args.extend(["-p", port, "--json"]);
    let server = start_with(PERF, &server_args, UCX_TCP);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut client_args = server_args.clone();
    client_args.push("127.0.0.1");
    let client = start_with(PERF, &client_args, UCX_TCP);
    let client_out = client.wait_with_output().expect("the client ran");
    let (server_ok, server_out) = finish(server, "ferrovia-perf server");
    let stdout = String::from_utf8_lossy(&client_out.stdout).into_owned();
    assert!(
        client_out.status.success() && server_ok,
        "{stdout}{}\n{server_out}",
        String::from_utf8_lossy(&client_out.stderr)
    );
    stdout
}

/// The value of `"name": V` in `record`, a number.
fn field(record: &str, name: &str) -> f64 {
    let key = format!("\"{name}\": ");
    let at = record
        .find(&key)
        .unwrap_or_else(|| panic!("no {name}: {record}"))
        + key.len();
    let end = record[at..]
        .find([',', '}'])
        .map_or(record.len(), |e| at + e);
    record[at..end]
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name} is no number: {record}"))
}

/// Every line of `out` is one JSON object of `test`; how many.
fn records<'a>(out: &'a str, test: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    for l in &lines {
        assert!(
            l.starts_with(&format!("{{\"test\": \"{test}\"")) && l.ends_with('}'),
            "not a record of {test}: {l}"
        );
    }
    lines
}

#[test]
fn bandwidth_results_are_json_lines() {
    let out = pair(&["write_bw", "-s", "4096", "-n", "200"], "18561");
    let rows = records(&out, "write_bw");
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(field(rows[0], "bytes"), 4096.0);
    assert!(field(rows[0], "iterations") >= 200.0, "{out}");
    for name in ["bw_peak_mb_s", "bw_average_mb_s", "msg_rate_mpps"] {
        assert!(field(rows[0], name) > 0.0, "{name}: {out}");
    }
}

#[test]
fn latency_results_are_json_lines() {
    let out = pair(&["write_lat", "-s", "8", "-n", "200"], "18563");
    let rows = records(&out, "write_lat");
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(field(rows[0], "bytes"), 8.0);
    let (min, typical, max) = (
        field(rows[0], "t_min_us"),
        field(rows[0], "t_typical_us"),
        field(rows[0], "t_max_us"),
    );
    assert!(0.0 < min && min <= typical && typical <= max, "{out}");
    assert!(
        field(rows[0], "p999_us") >= field(rows[0], "p99_us"),
        "{out}"
    );
}
