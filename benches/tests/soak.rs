//! The soak with faults (reliability issue 22, part 6), one minute of it:
//! 8 ranks over UCX tcp on the host, 4 over verbs on soft-RoCE in the VM.
//! Random drain-deadline flushes and reconnects, dropped async futures,
//! barriers on random subsets, clients by address, and garbage at every
//! port ferrovia listens on; every message checked. `cargo xtask bench
//! soak --minutes M` runs it longer.

use std::process::Command;

const SOAK: &str = env!("CARGO_BIN_EXE_ferrovia-soak");

fn soak(ranks: usize, env: &[(&str, &str)], extra: &[&str]) {
    let mut c = Command::new(SOAK);
    c.args(["drive", "--ranks", &ranks.to_string(), "--seconds", "60"])
        .args(extra)
        .env_remove("UCX_TLS")
        .env_remove("UCX_NET_DEVICES");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run ferrovia-soak");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let last = stdout
        .lines()
        .find(|l| l.starts_with("soak: PASSED"))
        .unwrap_or_else(|| panic!("{stdout}\n{stderr}"));
    for zero in ["lost 0,", "wrong 0,", "hangs 0;"] {
        assert!(last.contains(zero), "{last}");
    }
    assert!(last.contains("resources flat"), "{last}");
}

#[test]
fn a_minute_of_faults_over_ucx_tcp_loses_nothing() {
    // UCX's own tcp ports abort on garbage (they trust their network):
    // only ferrovia's are attacked.
    soak(
        8,
        &[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")],
        &["--spare-ucx-ports"],
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_minute_of_faults_over_verbs_loses_nothing() {
    soak(4, &[("FERROVIA_BACKEND", "verbs")], &[]);
}
