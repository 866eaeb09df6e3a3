//! Rails (`Node::open_rail`, `Node::reconnect_with`), through
//! `ferrovia-rank rails`. On verbs, rail 1 runs on `FERROVIA_RAIL1_DEVICE`
//! when the environment names a second device, else on the node's.

use std::process::Child;
use std::time::Duration;

use super::{BackendEnv, Job, RANK_BIN, finish};

/// Three ranks open two rails and exchange sends and writes with every
/// rank on each, checked; rail 1's connection between ranks 0 and 1 is
/// flushed, the rest carries a checked round, ranks 0 and 1 reconnect it
/// with `reconnect_with` while rank 2 writes into their memory on both
/// rails, and every connection carries a checked round again. The
/// reconnect counts on rail 1's link only.
pub(crate) fn two_rails_carry_data_and_one_reconnects_while_the_rest_works(b: BackendEnv) {
    let results = super::run_all(b, 3, &["rails"], &[], Duration::from_secs(180));
    for (r, (_, out, _)) in results.iter().enumerate() {
        for line in [
            "round 0 on both rails verified",
            "round 1 verified on rail 0 and on rail 1 but between ranks 0 and 1",
            "round 2 on both rails verified",
            "rails done",
        ] {
            assert!(
                out.contains(&format!("rank {r}: {line}")),
                "rank {r}: {out}"
            );
        }
        for id in [0, 1] {
            assert!(out.contains(&format!("rank {r}: rail {id} (")), "{out}");
        }
    }
    let out0 = &results[0].1;
    assert!(
        out0.contains("rank 0: flushed rail 1's connection to rank 1"),
        "{out0}"
    );
    assert!(
        out0.contains("on the flushed rail: Err") && out0.contains("Broken { peer: 1 }"),
        "{out0}"
    );
    for (r, peer) in [(0, 1), (1, 0)] {
        let out = &results[r].1;
        for line in [
            format!("rank {r}: reconnected rail 1 (link 2) with rank {peer}"),
            format!("rank {r}: rank 2's writes during the reconnect landed on both rails"),
            format!(
                "rank {r}: generations with rank {peer}: node Some(0), rail 0 Some(0), rail 1 Some(1)"
            ),
        ] {
            assert!(out.contains(&line), "rank {r}: {out}");
        }
    }
    let out2 = &results[2].1;
    assert!(
        out2.contains("writes to ranks 0 and 1 on both rails while they reconnected"),
        "{out2}"
    );
    for line in out2
        .lines()
        .chain(out0.lines())
        .filter(|l| l.contains("open in"))
    {
        println!("{line}");
    }
}

/// A rank whose rail names a device that does not exist (rank 0, which
/// serves the trade, then rank 2): it fails with its own typed error, and
/// every other rank at once, naming it, well before the 30 s timeout;
/// then the rail opens again on every rank and carries a checked round.
pub(crate) fn a_rail_on_a_missing_device_fails_every_rank_at_once_naming_it(b: BackendEnv) {
    for failing in [0, 2] {
        let job = Job::new(RANK_BIN, 3, b);
        let f = failing.to_string();
        let args = ["rails", "--fail-rank", &f, "--timeout-ms", "30000"];
        let ranks: Vec<Child> = (0..3).map(|r| job.spawn(r, &args, &[])).collect();
        let results: Vec<_> = ranks
            .into_iter()
            .map(|c| finish(c, Duration::from_secs(120)))
            .collect();
        for (r, (code, out, err)) in results.iter().enumerate() {
            assert_eq!(*code, Some(0), "rank {r} (failing {failing}): {out}{err}");
            let line = out
                .lines()
                .find(|l| l.contains("open_rail failed in"))
                .unwrap_or_else(|| panic!("rank {r}: {out}"));
            let ms: u64 = line
                .split("failed in ")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{line}"));
            assert!(ms < 10_000, "rank {r} waited {ms} ms: {line}");
            if r == failing {
                assert!(line.contains("\"no-such-device\""), "{line}");
            } else {
                assert!(
                    line.contains(&format!("rank {failing} could not open its side")),
                    "{line}"
                );
            }
            assert!(
                out.contains(&format!("rank {r}: rail 0 opened again and verified")),
                "{out}"
            );
            println!("{line}");
        }
    }
}
