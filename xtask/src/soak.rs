//! `cargo xtask bench soak [--minutes M]`: the soak with faults of the
//! reliability issue, outside the CI time budget (the test suite runs a
//! minute of each): `ferrovia-soak drive` with 8 ranks over UCX tcp on
//! this host, then 4 ranks over verbs in one VM boot (or on the host's
//! RDMA device). Each run prints its own report: messages lost, wrong,
//! hangs, and every rank's threads, files and memory at the first minute
//! and at the end.

use std::ffi::OsString;
use std::process::Command;
use std::time::Duration;

use crate::cargo_artifacts::{self, SOAK};
use crate::failure::{Failure, Result};
use crate::vm::{self, VmOptions};
use crate::{cmd, deps, rdma_devices, workspace};

/// Ranks of the UCX run and of the verbs run.
const UCX_RANKS: &str = "8";
const VERBS_RANKS: &str = "4";

pub(crate) fn command(minutes: u64) -> Result<u8> {
    workspace::enter_root()?;
    deps::ensure(deps::ALL)?;
    let program = cargo_artifacts::build_program(SOAK, true)?;
    let seconds = (minutes.max(1) * 60).to_string();
    say!("xtask bench soak: {UCX_RANKS} ranks over UCX tcp on this host, {minutes} min");
    let mut ucx = Command::new(&program);
    ucx.args([
        "drive",
        "--ranks",
        UCX_RANKS,
        "--seconds",
        &seconds,
        "--spare-ucx-ports",
    ])
    .env("FERROVIA_BACKEND", "ucx")
    .env("UCX_TLS", "tcp")
    .env_remove("UCX_NET_DEVICES");
    let ucx_ok = cmd::run(&mut ucx).is_ok();
    let drive: Vec<OsString> = vec![
        "/usr/bin/env".into(),
        "FERROVIA_BACKEND=verbs".into(),
        program.into_os_string(),
        "drive".into(),
        "--ranks".into(),
        VERBS_RANKS.into(),
        "--seconds".into(),
        seconds.clone().into(),
    ];
    let verbs_ok = if rdma_devices::host_devices().is_empty() {
        say!("xtask bench soak: {VERBS_RANKS} ranks over verbs in the VM, {minutes} min");
        let mut options = VmOptions::new(drive);
        options.timeout = Duration::from_secs(minutes.max(1) * 60 + 900);
        vm::run(&options)? == 0
    } else {
        say!("xtask bench soak: {VERBS_RANKS} ranks over the host's RDMA device, {minutes} min");
        let mut here = Command::new(&drive[0]);
        here.args(&drive[1..]);
        cmd::run(&mut here).is_ok()
    };
    if ucx_ok && verbs_ok {
        Ok(0)
    } else {
        Err(Failure::new(format!(
            "the soak failed: UCX tcp {}, verbs {}",
            if ucx_ok { "passed" } else { "FAILED" },
            if verbs_ok { "passed" } else { "FAILED" }
        )))
    }
}
