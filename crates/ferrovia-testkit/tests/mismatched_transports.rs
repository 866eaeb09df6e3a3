//! A failed connect after check-in names the peer (issue 13 part 2): two
//! ranks whose UCX transports share nothing (tcp only against shared
//! memory only) cannot create endpoints to each other, and the error says
//! which rank could not be reached.
#![cfg(feature = "ucx")]

mod suite;

use std::process::Child;
use std::time::Duration;

use suite::{Job, RANK_BIN, finish};

#[test]
fn a_peer_without_a_common_transport_is_named() {
    let job = Job::new(RANK_BIN, 2, &[("FERROVIA_BACKEND", "ucx")]);
    let tls = ["tcp", "sm,self"];
    let ranks: Vec<Child> = (0..2)
        .map(|r| job.spawn(r, &["exchange", "1"], &[("UCX_TLS", tls[r])]))
        .collect();
    let results: Vec<_> = ranks
        .into_iter()
        .map(|c| finish(c, Duration::from_secs(120)))
        .collect();
    let named = results.iter().enumerate().any(|(r, (code, _, err))| {
        *code == Some(2) && err.contains(&format!("rank {r} could not connect to rank {}", 1 - r))
    });
    assert!(named, "{results:#?}");
}
