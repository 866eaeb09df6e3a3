//! Runs every example as a user would (`cargo run --example NAME`: the
//! example starts its own ranks on this machine), over UCX on any host and
//! over verbs on (soft-)RoCE under `cargo xtask test`.

use std::path::PathBuf;
use std::process::Command;

/// Examples and how many ranks each starts.
const EXAMPLES: &[(&str, usize)] = &[
    ("hello", 2),
    ("ping_pong", 2),
    ("remote_array", 2),
    ("all_to_all", 4),
    ("barrier_loop", 4),
    ("param_server", 4),
    ("watch_flag", 2),
];

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

fn run_all(env: &[(&str, &str)]) {
    for &(name, ranks) in EXAMPLES {
        let out = Command::new(example(name))
            .envs(env.iter().copied())
            .env_remove("FERROVIA_RANK")
            .output()
            .unwrap_or_else(|e| panic!("run {name}: {e}"));
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success(),
            "{name} failed ({:?}): {stderr}",
            out.status
        );
        let reports = stdout.lines().filter(|l| l.starts_with(name)).count();
        assert!(
            reports >= ranks.min(2) - 1 && reports >= 1,
            "{name} printed {reports} reports for {ranks} ranks: {stdout}"
        );
    }
}

#[cfg(feature = "ucx")]
#[test]
fn every_example_runs_over_ucx_tcp() {
    run_all(&[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")]);
}

#[cfg(feature = "verbs")]
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn every_example_runs_over_verbs() {
    run_all(&[("FERROVIA_BACKEND", "verbs")]);
}
