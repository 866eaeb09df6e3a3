//! `RUST_LOG` filters per target in ferrovia's programs: with
//! `warn,ferrovia_node=debug` a job logs the node's debug records and no
//! other crate's (the hand-written logger read that as debug for all).

mod suite;

use std::process::Child;
use std::time::Duration;

use suite::{Job, RANK_BIN, finish};

const UCX_TCP: suite::BackendEnv = &[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")];

/// The targets of the DEBUG records a 2-rank exchange logs at `rust_log`.
fn debug_targets(rust_log: &str) -> Vec<String> {
    let job = Job::new(RANK_BIN, 2, UCX_TCP);
    let ranks: Vec<Child> = (0..2)
        .map(|r| job.spawn(r, &["exchange", "2"], &[("RUST_LOG", rust_log)]))
        .collect();
    let mut targets = Vec::new();
    for (r, child) in ranks.into_iter().enumerate() {
        let (code, out, err) = finish(child, Duration::from_secs(120));
        assert_eq!(code, Some(0), "rank {r}: {out}{err}");
        for line in err.lines() {
            if let Some(target) = debug_target(line) {
                targets.push(target.to_owned());
            }
        }
    }
    targets
}

/// The target of a DEBUG line: `<time> DEBUG [<span>{<fields>}:...]
/// <target>: <message>`, the spans (their fields may hold spaces) before
/// the target, which is the first word naming a ferrovia crate.
fn debug_target(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    if words.nth(1) != Some("DEBUG") {
        return None;
    }
    words
        .find(|w| w.starts_with("ferrovia_") && w.ends_with(':') && !w.contains('{'))
        .map(|w| w.trim_end_matches(':'))
}

#[test]
fn a_debug_line_names_its_target_after_its_spans() {
    let line = "2026-01-01T00:00:00.000000Z DEBUG bootstrap{rank=0 world_size=2}:\
                barrier{rank=0 ranks=[0, 1] algorithm=Dissemination}: \
                ferrovia_node::barrier: barrier passed took_us=12";
    assert_eq!(debug_target(line), Some("ferrovia_node::barrier"));
    assert_eq!(
        debug_target("2026 DEBUG ferrovia_ucx::engine: x"),
        Some("ferrovia_ucx::engine")
    );
    assert_eq!(debug_target("2026  INFO ferrovia_node: x"), None);
}

#[test]
fn a_per_target_directive_holds_for_its_target_only() {
    let all = debug_targets("debug");
    assert!(
        all.iter().any(|t| t.starts_with("ferrovia_node"))
            && all.iter().any(|t| !t.starts_with("ferrovia_node")),
        "a debug run should log the node and another crate: {all:?}"
    );
    let node_only = debug_targets("warn,ferrovia_node=debug");
    assert!(!node_only.is_empty(), "no debug record from the node");
    let others: Vec<&String> = node_only
        .iter()
        .filter(|t| !t.starts_with("ferrovia_node"))
        .collect();
    assert!(
        others.is_empty(),
        "debug records of other targets: {others:?}"
    );
}
