//! The `prometheus` example, scraped: rank 0's exporter on 127.0.0.1
//! serves what its node counted, and the numbers are what the example
//! did (10 sends of 4096 B to rank 1, as many receives from it).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// `target/<profile>/examples/prometheus` (cargo builds it for the tests).
fn example() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .join("examples")
        .join("prometheus")
}

/// Two free ports in a row, for ranks 0 and 1.
fn free_ports() -> u16 {
    loop {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = a.local_addr().unwrap().port();
        if port < u16::MAX && TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
}

/// `GET /metrics` by hand: the body.
fn scrape(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    reply
}

/// The value of the series `name` whose labels include `labels`.
fn value(body: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    body.lines().find_map(|line| {
        let (series, v) = line.rsplit_once(' ')?;
        let (n, rest) = series.split_once('{')?;
        if n != name {
            return None;
        }
        let have: BTreeMap<&str, &str> = rest
            .trim_end_matches('}')
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k, v.trim_matches('"')))
            .collect();
        labels
            .iter()
            .all(|(k, v)| have.get(k) == Some(v))
            .then(|| v.parse().ok())?
    })
}

#[test]
fn the_prometheus_example_serves_what_the_node_counted() {
    let port = free_ports();
    let mut child = Command::new(example())
        .env("FERROVIA_BACKEND", "ucx")
        .env("FERROVIA_METRICS_PORT", port.to_string())
        .env_remove("FERROVIA_RANK")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run the prometheus example");
    // Both ranks say where they serve once they have published.
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut serving = 0;
    while serving < 2 {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the example's ranks never said where they serve");
        if line.contains("metrics on http://127.0.0.1:") {
            serving += 1;
        }
    }
    let body = scrape(port);
    let rank0_to_1 = [("rank", "0"), ("peer", "1")];
    let with = |kind: &'static str| {
        let mut l = rank0_to_1.to_vec();
        l.push(("kind", kind));
        l
    };
    assert_eq!(
        value(&body, "ferrovia_operations_total", &with("send")),
        Some(10.0),
        "{body}"
    );
    assert_eq!(
        value(&body, "ferrovia_bytes_total", &with("send")),
        Some(40960.0),
        "{body}"
    );
    assert_eq!(
        value(&body, "ferrovia_operations_total", &with("receive")),
        Some(10.0)
    );
    assert_eq!(
        value(&body, "ferrovia_bytes_total", &with("receive")),
        Some(40960.0)
    );
    let mut ok = rank0_to_1.to_vec();
    ok.push(("status", "IBV_WC_SUCCESS"));
    assert!(
        value(&body, "ferrovia_completions_total", &ok).unwrap_or(0.0) >= 20.0,
        "{body}"
    );
    assert_eq!(
        value(&body, "ferrovia_flushes_total", &rank0_to_1),
        Some(0.0)
    );
    assert_eq!(
        value(&body, "ferrovia_outstanding_requests", &rank0_to_1),
        Some(0.0)
    );
    // Rank 1 serves its own, on the next port.
    let body1 = scrape(port + 1);
    let rank1_to_0 = [("rank", "1"), ("peer", "0"), ("kind", "receive")];
    assert_eq!(
        value(&body1, "ferrovia_bytes_total", &rank1_to_0),
        Some(40960.0),
        "{body1}"
    );
    // Closing the standard input ends the example.
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}
