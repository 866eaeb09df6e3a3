//! Runs every example as a user would (`cargo run --example NAME`: the
//! example starts its own ranks on this machine), over UCX on any host and
//! over verbs on (soft-)RoCE under `cargo xtask test`.

use std::path::PathBuf;
use std::process::Command;

/// Examples, how many ranks each starts, and which ranks print a report
/// (`None`: every rank, each naming itself `rank R`).
const EXAMPLES: &[(&str, usize, Option<&[usize]>)] = &[
    ("hello", 2, Some(&[1])),
    ("ping_pong", 2, None),
    ("remote_array", 2, None),
    ("all_to_all", 4, None),
    ("barrier_loop", 4, None),
    ("param_server", 4, None),
    ("watch_flag", 2, None),
    ("counter", 4, None),
    ("collector", 4, None),
    // A server and 3 client processes: one report each.
    ("accept_clients", 4, Some(&[0, 1, 2, 3])),
    #[cfg(feature = "async")]
    ("async_service", 4, None),
    #[cfg(feature = "transfer")]
    ("kv_transfer", 2, None),
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
    for &(name, ranks, reporters) in EXAMPLES {
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
        let reports: Vec<&str> = stdout.lines().filter(|l| l.starts_with(name)).collect();
        match reporters {
            // Every rank reports, once, naming itself.
            None => {
                assert_eq!(reports.len(), ranks, "{name}: {stdout}");
                for r in 0..ranks {
                    assert!(
                        reports.iter().any(|l| l.contains(&format!("rank {r}"))),
                        "{name}: no report from rank {r}: {stdout}"
                    );
                }
            }
            Some(which) => assert_eq!(reports.len(), which.len(), "{name}: {stdout}"),
        }
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
    // The VM has 2 GiB: kv_transfer's two pools at 256 MiB each. Its
    // guest is emulated (no KVM) and runs debug builds: making and
    // checking 1000 blocks of 64 KiB took 44 s and 72 s there, beyond
    // the example's 60 s waits (the transfer itself took 2.4 s), so it
    // moves 250.
    run_all(&[
        ("FERROVIA_BACKEND", "verbs"),
        ("KV_POOL_MIB", "256"),
        ("KV_BLOCKS", "250"),
    ]);
}
