//! The transfer layer on an RDMA device (soft-RoCE under `cargo xtask
//! test`): the shared scenarios with every rank a verbs `Node`, two rails
//! (rxe0 and rxe1 in the VM), and a link taken down mid-batch: its runs
//! finish over the other device.
#![cfg(feature = "verbs")]

mod batches;
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use ferrovia_transfer::Op;

use batches::{BLOCK, BLOCKS, blocks_to, check_target, filled, setup};
use common::{T, job, on_verbs};

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn write_read_and_notify_over_two_rails() {
    on_verbs();
    batches::write_read_and_notify_over_two_rails();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn bad_input_is_typed() {
    on_verbs();
    batches::bad_input_is_typed();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_deregistered_region_fails_naming_the_entry() {
    on_verbs();
    batches::a_deregistered_region_fails_naming_the_entry();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn owned_batches_hold_their_lease() {
    on_verbs();
    batches::owned_batches_hold_their_lease();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_lost_rail_moves_its_runs_and_comes_back() {
    on_verbs();
    batches::a_lost_rail_moves_its_runs_and_comes_back();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn forgotten_batches_free_nothing_under_the_device() {
    on_verbs();
    batches::forgotten_batches_free_nothing_under_the_device();
}

/// `ip link set DEV up|down`.
fn link(dev: &str, state: &str) {
    let s = Command::new("ip")
        .args(["link", "set", dev, state])
        .status()
        .expect("run ip");
    assert!(s.success(), "ip link set {dev} {state}: {s}");
}

/// Brings the link back up however the test ends, so the tests after it
/// find rail 1 working.
struct Down<'a>(&'a str);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "set", self.0, "up"])
            .status();
    }
}

/// The port of `dev` reads ACTIVE (sysfs), within `limit`.
fn wait_active(dev: &str, limit: Duration) {
    let path = format!("/sys/class/infiniband/{dev}/ports/1/state");
    let start = Instant::now();
    loop {
        let state = std::fs::read_to_string(&path).unwrap_or_default();
        if state.contains("ACTIVE") {
            return;
        }
        assert!(start.elapsed() < limit, "{dev} not ACTIVE: {state}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Rail 1's link (`SOFTROCE_NETDEV1`, under rxe1) goes down as a batch
/// starts: its runs on rail 1 time out and finish over rail 0; the batch
/// lands every byte, naming rail 1 to rank 1 as lost. With the link up
/// again both ranks reconnect rail 1 and the next batch uses it.
#[test]
#[ignore = "needs two RDMA devices: cargo xtask test"]
fn a_link_down_mid_batch_moves_its_runs_to_the_other_device() {
    on_verbs();
    let netdev = std::env::var("SOFTROCE_NETDEV1")
        .expect("SOFTROCE_NETDEV1: the VM's second rail (cargo xtask vm sets it)");
    let dev1 = std::env::var("SOFTROCE_DEV1").expect("SOFTROCE_DEV1");
    let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
    job(2, move |rank, mut node| {
        let (mut engine, target, remotes) = setup(&mut node);
        if rank == 0 {
            let mut src = filled(&engine, 0);
            let prepared = engine.prepare(&src, &blocks_to(1), &remotes).unwrap();
            let lease = src.lease_mut();
            let start = Instant::now();
            let mut down = None;
            let report = engine
                .scope(|s| {
                    link(&netdev, "down");
                    down = Some(Down(&netdev));
                    s.submit(&prepared, &lease, Op::Write, Some(b"down"))?
                        .wait(T)
                })
                .unwrap();
            drop(lease);
            println!("rail 1 down mid-batch: {report:?} in {:?}", start.elapsed());
            assert_eq!(report.bytes, (BLOCKS * BLOCK) as u64);
            assert_eq!(report.rails_lost, [(1, 1)]);
            assert!(report.retried > 0, "rail 1's runs moved: {report:?}");
            drop(down);
            wait_active(&dev1, T);
        } else {
            let n = engine.wait_notification(T).unwrap();
            assert_eq!(&n.data[..], b"down");
            check_target(&target, 0);
        }
        gate.wait();
        let peer = 1 - rank;
        engine.reconnect_rail(&mut node, 1, peer, T).unwrap();
        node.barrier(&[0, 1], T).unwrap();
        if rank == 0 {
            let mut src = filled(&engine, 0);
            let prepared = engine.prepare(&src, &blocks_to(1), &remotes).unwrap();
            let lease = src.lease_mut();
            let report = engine
                .scope(|s| s.submit(&prepared, &lease, Op::Write, None)?.wait(T))
                .unwrap();
            assert!(report.bytes_per_rail[1] > 0, "rail 1 is back: {report:?}");
        }
        node.barrier(&[0, 1], T).unwrap();
    });
}
