//! Reconnecting (issue 13 part 3), through `ferrovia-rank reconnect`.

use std::process::Child;
use std::time::Duration;

use super::{BackendEnv, Job, finish};

/// Ranks 0 and 1 of three lose their connection to a drain deadline,
/// reconnect, exchange data both ways, and every rank passes barriers.
pub(crate) fn a_flushed_connection_reconnects_and_barriers_pass(b: BackendEnv) {
    let job = Job::new(3, b);
    let ranks: Vec<Child> = (0..3).map(|r| job.spawn(r, &["reconnect"], &[])).collect();
    let results: Vec<_> = ranks
        .into_iter()
        .map(|c| finish(c, Duration::from_secs(120)))
        .collect();
    for (r, (code, out, err)) in results.iter().enumerate() {
        assert_eq!(*code, Some(0), "rank {r}: {out}{err}");
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

/// Rank 1 is gone: rank 0's reconnect fails within its timeout, naming
/// it, and the other ranks go on.
pub(crate) fn a_reconnect_to_a_dead_rank_fails_within_its_timeout_naming_it(b: BackendEnv) {
    let job = Job::new(3, b);
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
