//! Remote atomics (issue 14), through `ferrovia-rank atomics`.

use std::time::Duration;

use super::{BackendEnv, run_all};

/// Four ranks add 1 to one counter 10,000 times each: exactly 40,000; a
/// ticket lock on compare-and-swap guards an array with no lost update;
/// every bad atomic is a typed error.
pub(crate) fn four_ranks_count_exactly_and_a_ticket_lock_loses_no_update(b: BackendEnv) {
    let args = ["atomics", "10000", "50"];
    let results = run_all(b, 4, &args, &[], Duration::from_secs(300));
    let out0 = &results[0].1;
    assert!(
        out0.contains("counter 40000 = 4 ranks x 10000 adds"),
        "{out0}"
    );
    assert!(
        out0.contains("8 words = 200 each, no lost update"),
        "{out0}"
    );
    for what in [
        "must be 8 bytes",
        "not 8-byte aligned",
        "do not fit",
        "REMOTE_READ",
    ] {
        assert!(
            out0.lines()
                .any(|l| l.contains("bad atomic") && l.contains(what)),
            "{what}: {out0}"
        );
    }
}
