//! A clean job says nothing at `RUST_LOG=warn` (issue 13 part 2): no WARN
//! or ERROR line from ferrovia, and none from UCX itself, which prints to
//! stdout.
#![cfg(feature = "ucx")]

mod suite;

use std::process::Child;
use std::time::Duration;

use suite::{Job, RANK_BIN, finish};

const UCX_TCP: suite::BackendEnv = &[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")];

#[test]
fn a_clean_four_rank_job_over_tcp_is_quiet() {
    for run in 0..3 {
        let job = Job::new(RANK_BIN, 4, UCX_TCP);
        let ranks: Vec<Child> = (0..4)
            .map(|r| job.spawn(r, &["exchange", "2"], &[("RUST_LOG", "warn")]))
            .collect();
        for (r, child) in ranks.into_iter().enumerate() {
            let (code, out, err) = finish(child, Duration::from_secs(120));
            assert_eq!(code, Some(0), "run {run}, rank {r}: {out}{err}");
            let noise: Vec<&str> = out
                .lines()
                .chain(err.lines())
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                .collect();
            assert!(noise.is_empty(), "run {run}, rank {r}: {noise:#?}");
        }
    }
}
