//! Reconnecting (issue 13 part 3), through `ferrovia-rank reconnect`.

use std::process::Child;
use std::time::Duration;

use super::{BackendEnv, Job, RANK_BIN, finish};

/// Ranks 0 and 1 of three lose their connection to a drain deadline,
/// reconnect, exchange data both ways, and every rank passes barriers.
pub(crate) fn a_flushed_connection_reconnects_and_barriers_pass(b: BackendEnv) {
    let results = super::run_all(b, 3, &["reconnect"], &[], Duration::from_secs(120));
    for (r, (_, out, _)) in results.iter().enumerate() {
        assert!(
            out.contains("barriers with every rank passed"),
            "rank {r}: {out}"
        );
    }
    let out0 = &results[0].1;
    assert!(out0.contains("rank 0: flushed"), "{out0}");
    assert!(
        out0.contains("before reconnecting: Err") && out0.contains("Broken { peer: 1 }"),
        "{out0}"
    );
    for (r, peer) in [(0, 1), (1, 0)] {
        let out = &results[r].1;
        assert!(
            out.contains(&format!(
                "rank {r}: exchanged data with rank {peer} both ways"
            )),
            "{out}"
        );
    }
}

/// The issue 22 case: rank 0 flushes its connection to rank 1, rank 1
/// then sends on the old connection, both reconnect; five cycles. Before
/// connection generations the first receive after the reconnect took
/// "STALE 0" and every later message was shifted by one; now the stale
/// send fails at rank 1 (rank 0's flush reset the connection) or rank 0
/// drops it, and every exchange after a reconnect is checked.
pub(crate) fn a_message_on_a_flushed_connection_never_reaches_the_new_one(b: BackendEnv) {
    let args = ["reconnect", "--stale", "--cycles", "5"];
    let results = super::run_all(b, 3, &args, &[], Duration::from_secs(180));
    for (r, (_, out, _)) in results.iter().enumerate() {
        assert!(
            out.contains("barriers with every rank passed"),
            "rank {r}: {out}"
        );
    }
    let (out0, out1) = (&results[0].1, &results[1].1);
    for cycle in 0..5 {
        assert!(
            out1.contains(&format!("a send on the flushed connection, cycle {cycle}:")),
            "{out1}"
        );
    }
    assert_eq!(
        out0.matches("exchanged data with rank 1 both ways").count(),
        5,
        "{out0}"
    );
    // Each stale send either failed at rank 1 or was dropped at rank 0.
    let failed = out1
        .lines()
        .filter(|l| l.contains("a send on the flushed connection") && !l.ends_with("Ok(())"))
        .count();
    let dropped: usize = out0
        .lines()
        .find_map(|l| l.strip_prefix("rank 0: stale messages dropped: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out0}"));
    println!("stale sends failed at the sender: {failed}, dropped at the receiver: {dropped}");
    assert!(failed + dropped >= 5, "{out0}{out1}");
}

/// Rank 1 is gone: rank 0's reconnect fails within its timeout, naming
/// it, and the other ranks go on.
pub(crate) fn a_reconnect_to_a_dead_rank_fails_within_its_timeout_naming_it(b: BackendEnv) {
    let job = Job::new(RANK_BIN, 3, b);
    let ranks: Vec<Child> = (0..3)
        .map(|r| job.spawn(r, &["reconnect", "--dead", "--timeout-ms", "2000"], &[]))
        .collect();
    let results: Vec<_> = ranks
        .into_iter()
        .map(|c| finish(c, Duration::from_secs(120)))
        .collect();
    for (r, (code, out, err)) in results.iter().enumerate() {
        assert_eq!(*code, Some(0), "rank {r}: {out}{err}");
    }
    let out0 = &results[0].1;
    let line = out0
        .lines()
        .find(|l| l.contains("reconnect to the dead rank 1 ended in"))
        .unwrap_or_else(|| panic!("{out0}"));
    assert!(line.contains("reconnecting to rank 1 failed"), "{line}");
    let ms: u64 = line
        .split("ended in ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!((2000..4000).contains(&ms), "{line}");
}
