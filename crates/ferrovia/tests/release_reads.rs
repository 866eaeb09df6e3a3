//! Memory a peer writes, read in an optimized build: `watch_flag` spins on
//! a word of shared memory with `load_u64` while its peer RDMA-writes it.
//! A read through a `&[u8]` may be hoisted out of such a loop in release
//! builds (and spins forever); this runs the release binary on every
//! backend so a regression shows as a hang turned failure.

use std::path::PathBuf;
use std::process::Command;

/// `target/release/examples/watch_flag`, built first when `build` is set
/// (the host tests build it; the VM run reuses what they built).
fn release_example(build: bool) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let target = exe
        .ancestors()
        .nth(3)
        .expect("target dir (target/<profile>/deps/<test>)");
    if build {
        // The same features as this test: a build without verbs must not
        // need rdma-core for the example either.
        let features: &[&str] = if cfg!(feature = "verbs") {
            &[]
        } else {
            &["--no-default-features", "--features", "ucx"]
        };
        let status = Command::new(env!("CARGO"))
            .args([
                "build",
                "--release",
                "-p",
                "ferrovia",
                "--example",
                "watch_flag",
            ])
            .args(features)
            .env("CARGO_TARGET_DIR", target)
            .status()
            .expect("run cargo build --release");
        assert!(
            status.success(),
            "cargo build --release --example watch_flag failed"
        );
    }
    let path = target.join("release").join("examples").join("watch_flag");
    assert!(
        path.exists(),
        "{} is missing: `cargo build --release --example watch_flag` (the host tests build it)",
        path.display()
    );
    path
}

fn watch(env: &[(&str, &str)], build: bool) {
    let out = Command::new(release_example(build))
        .envs(env.iter().copied())
        .env_remove("FERROVIA_RANK")
        .output()
        .expect("run watch_flag");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "watch_flag failed ({:?}): {stderr}",
        out.status
    );
    assert!(
        stdout.contains("rank 1 saw the peer's write"),
        "rank 1 did not report the write: {stdout}"
    );
}

#[cfg(feature = "ucx")]
#[test]
fn a_release_build_spinning_on_shared_memory_sees_a_peers_write_over_ucx() {
    watch(&[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")], true);
    watch(
        &[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "sm,self")],
        false,
    );
}

#[cfg(feature = "verbs")]
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_release_build_spinning_on_shared_memory_sees_a_peers_write_over_verbs() {
    watch(&[("FERROVIA_BACKEND", "verbs")], false);
}
