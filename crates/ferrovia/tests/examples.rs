//! Runs the examples on a real (soft-)RoCE device, multi-rank ones as
//! several processes. Run by `cargo xtask test`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};

/// `target/<profile>/examples/NAME`, next to this test's `deps` folder
/// (cargo builds the examples for `cargo test`).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .join("examples")
        .join(name)
}

fn check(name: &str, out: Output) {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{name} failed ({:?}): {stderr}",
        out.status
    );
    assert!(stdout.contains(name), "{name} printed no report: {stdout}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn single_process_examples_run() {
    for name in ["ping_pong", "remote_array"] {
        let out = Command::new(example(name))
            .output()
            .unwrap_or_else(|e| panic!("run {name}: {e}"));
        check(name, out);
    }
}

fn run_ranks(name: &str, n: usize) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ranks: Vec<_> = (0..n)
        .map(|r| {
            Command::new(example(name))
                .env("FERROVIA_RANK", r.to_string())
                .env("FERROVIA_WORLD_SIZE", n.to_string())
                .env("FERROVIA_RENDEZVOUS", format!("127.0.0.1:{port}"))
                .env("FERROVIA_JOB_TOKEN", "examples")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {name}: {e}"))
        })
        .collect();
    for child in ranks {
        check(name, child.wait_with_output().unwrap());
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn multi_rank_examples_run_with_four_ranks() {
    for name in ["all_to_all", "barrier_loop", "param_server"] {
        run_ranks(name, 4);
    }
}
