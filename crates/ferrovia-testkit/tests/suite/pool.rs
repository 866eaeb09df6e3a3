//! The shared receive pool (issue 14), through `ferrovia-rank pool-*`.

use std::time::Duration;

use super::BackendEnv;

/// Bytes of one message, and pooled receives per rank (ferrovia-rank's).
const SLOT: usize = 64;
const DEPTH: usize = 64;

fn run(b: BackendEnv, n: usize, args: &[&str]) -> Vec<(Option<i32>, String, String)> {
    super::run_all(b, n, args, &[], Duration::from_secs(300))
}

/// All-to-all where every message lands in the receiver's pool: in order
/// per sender, none lost, and a rank holds DEPTH receive buffers whatever
/// the number of peers (per-peer rings would hold (n - 1) x DEPTH).
pub(crate) fn all_to_all_through_the_pool(b: BackendEnv) {
    for n in [2, 4, 8] {
        let results = run(b, n, &["pool-exchange", "32"]);
        for (r, (_, out, _)) in results.iter().enumerate() {
            let want = format!(
                "rank {r}: received {} messages from {} peers in order through {DEPTH} pooled receives; receive buffers registered: {} bytes",
                32 * (n - 1),
                n - 1,
                DEPTH * SLOT
            );
            assert!(out.contains(&want), "{n} ranks, rank {r}: {out}");
        }
    }
}

/// Three senders outrun rank 0's eight slowly refilled receives: nothing
/// is lost, and the pool's limit event fires.
pub(crate) fn senders_faster_than_the_refill_lose_no_message(b: BackendEnv) {
    let results = run(b, 4, &["pool-flood", "300"]);
    let out0 = &results[0].1;
    let line = out0
        .lines()
        .find(|l| {
            l.contains("flood of 900 messages through 8 pooled receives: none lost, in order")
        })
        .unwrap_or_else(|| panic!("{out0}"));
    let limits: u64 = line
        .split("limit event ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(limits >= 1, "{line}");
}

/// A message too long for the pooled receive that took it names its
/// sender, breaks that sender's connection on both backends, and nothing
/// the sender sends after it reaches the pool.
pub(crate) fn a_message_longer_than_a_pooled_receive_names_its_sender(b: BackendEnv) {
    let results = run(b, 3, &["pool-too-long"]);
    let out0 = &results[0].1;
    let long = out0
        .lines()
        .find(|l| l.contains("the long message"))
        .unwrap_or_else(|| panic!("{out0}"));
    assert!(long.contains("Err") && long.contains("peer 1"), "{long}");
    // The verbs status is LOC_LEN_ERR (UCX says so too); soft-RoCE reports
    // LOC_QP_OP_ERR for it (see the channel's device test).
    assert!(
        long.contains("IBV_WC_LOC_LEN_ERR") || long.contains("IBV_WC_LOC_QP_OP_ERR"),
        "{long}"
    );
    // Rank 1's 50 later messages, on a connection the long one broke,
    // never reach the pool (before: over UCX the pool took them).
    assert!(out0.contains("then from Some(2), intact: true"), "{out0}");
    let out1 = &results[1].1;
    println!(
        "{}",
        out1.lines()
            .find(|l| l.contains("later sends"))
            .unwrap_or("")
    );
    println!(
        "{}",
        out0.lines().find(|l| l.contains("dropped")).unwrap_or("")
    );
}
