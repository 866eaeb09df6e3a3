//! A barrier abandoned by a rank that knows a peer is unreachable,
//! through `ferrovia-rank barrier-abandon`.

use std::process::Child;
use std::time::Duration;

use super::{BackendEnv, Job, RANK_BIN, finish, named_ranks};

const TIMEOUT_MS: u64 = 10_000;

/// Rank 2 breaks its connection to rank 0, then ranks 0, 1 and 2 enter
/// `[0, 1, 2]` with a 10 s timeout. Rank 2 fails it at once; rank 1 hears
/// that it gave up (and why) and fails within a fraction of the timeout,
/// and so does rank 0, which rank 2 cannot reach (rank 1 passes it on).
/// The pairs `[0, 1]` and `[1, 2]` then pass barriers. Before ranks told
/// each other, ranks 0 and 1 waited out the timeout and the query window.
pub(crate) fn a_rank_that_abandons_a_barrier_fails_the_others_fast(b: BackendEnv) {
    let job = Job::new(RANK_BIN, 3, b);
    let ms = TIMEOUT_MS.to_string();
    let ranks: Vec<Child> = (0..3)
        .map(|r| job.spawn(r, &["barrier-abandon", &ms], &[]))
        .collect();
    let results: Vec<_> = ranks
        .into_iter()
        .map(|c| finish(c, Duration::from_secs(90)))
        .collect();
    for (r, (code, out, err)) in results.iter().enumerate() {
        assert_eq!(*code, Some(0), "rank {r}: {out}{err}");
        assert!(
            out.contains("the barriers after it passed"),
            "rank {r}: {out}"
        );
    }
    let line = |r: usize| {
        let out = &results[r].1;
        out.lines()
            .find(|l| l.contains("[0, 1, 2] failed in "))
            .unwrap_or_else(|| panic!("rank {r}: {out}"))
            .to_owned()
    };
    let took = |l: &str| -> f64 {
        l.split("failed in ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{l}"))
    };
    let lines: Vec<String> = (0..3).map(line).collect();
    for l in &lines {
        println!("{l}");
    }
    let waited: Vec<f64> = lines.iter().map(|l| took(l)).collect();
    println!(
        "[0, 1, 2] with a {TIMEOUT_MS} ms timeout failed after: rank 0 {:.3} ms, rank 1 {:.3} ms, rank 2 {:.3} ms",
        waited[0], waited[1], waited[2]
    );
    // Generous bounds: the host is loaded.
    for (r, l) in lines.iter().enumerate() {
        assert!(waited[r] < (TIMEOUT_MS / 2) as f64, "rank {r} waited: {l}");
    }
    assert!(
        lines[2].contains("connection already broken"),
        "{}",
        lines[2]
    );
    assert_eq!(named_ranks(&lines[2]), [0], "{}", lines[2]);
    // Rank 1 hears it from rank 2, or from rank 0 where rank 2's flush
    // broke rank 0's side too (then rank 0 gave up on rank 2 first).
    assert!(
        lines[1].contains("rank 2 abandoned it (its connection to rank 0 is broken)")
            || lines[1].contains("rank 0 abandoned it (its connection to rank 2 is broken)"),
        "{}",
        lines[1]
    );
    // Rank 0 hears it from rank 1, or finds rank 2 gone itself.
    assert!(
        lines[0].contains("rank 2 abandoned it") || named_ranks(&lines[0]) == [2],
        "{}",
        lines[0]
    );
}
