//! A 4-rank job over UCX tcp (`ferrovia-rank exchange`): what every rank's
//! `Node::stats()` counted per peer is what the job did (each iteration a
//! 64-byte send to every other rank, a 64-byte write to and a 64-byte read
//! from every rank, itself included over its loopback connection; before
//! them `all_gather_remote` writes a 32-byte directory entry to every
//! rank, and the barriers' signals are 8-byte writes of their own), and
//! its
//! `RUST_LOG=ferrovia_node=debug` output has the spans of bootstrap,
//! connection setup per peer, barriers with their rank list and
//! algorithm, and teardown per peer.
#![cfg(feature = "ucx")]

mod suite;

use std::collections::BTreeMap;
use std::process::Child;
use std::time::Duration;

use suite::{Job, RANK_BIN, finish};

const UCX_TCP: suite::BackendEnv = &[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")];
const RANKS: usize = 4;
const ITERS: u64 = 5;
/// `ferrovia-rank exchange`'s message size.
const SLOT: u64 = 64;
/// A barrier signal.
const SIGNAL: u64 = 8;
/// A directory entry of `all_gather_remote`.
const DIRECTORY: u64 = 32;

/// `stats rank=R peer=P key=value...` lines: (rank, peer) -> key -> value.
fn stats_lines(out: &str) -> BTreeMap<(u64, u64), BTreeMap<String, u64>> {
    let mut all = BTreeMap::new();
    for line in out.lines().filter(|l| l.starts_with("stats ")) {
        let kv: BTreeMap<String, u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.parse().unwrap()))
            .collect();
        all.insert((kv["rank"], kv["peer"]), kv);
    }
    all
}

#[test]
fn a_four_rank_job_counts_what_it_sent_and_traces_its_steps() {
    let job = Job::new(RANK_BIN, RANKS, UCX_TCP);
    let env = [
        ("FERROVIA_RANK_STATS", "1"),
        ("RUST_LOG", "ferrovia_node=debug"),
    ];
    let ranks: Vec<Child> = (0..RANKS)
        .map(|r| job.spawn(r, &["exchange", &ITERS.to_string()], &env))
        .collect();
    for (r, child) in ranks.into_iter().enumerate() {
        let (code, out, err) = finish(child, Duration::from_secs(120));
        assert_eq!(code, Some(0), "rank {r}: {out}{err}");
        let stats = stats_lines(&out);
        assert_eq!(stats.len(), RANKS, "rank {r}: {out}");
        let me = r as u64;
        for p in 0..RANKS as u64 {
            let s = &stats[&(me, p)];
            let to_another = u64::from(p != me);
            // Sends: to every other rank; reads: from every rank.
            assert_eq!(
                s["send_ops"],
                ITERS * to_another,
                "rank {r} peer {p}: {s:?}"
            );
            assert_eq!(s["send_bytes"], ITERS * SLOT * to_another, "{s:?}");
            assert_eq!(s["read_ops"], ITERS, "{s:?}");
            assert_eq!(s["read_bytes"], ITERS * SLOT, "{s:?}");
            // Writes: the directory entry, the job's to every rank, and
            // the barriers' signals.
            assert!(s["write_ops"] > ITERS, "{s:?}");
            let signals = s["write_ops"] - ITERS - 1;
            assert_eq!(
                s["write_bytes"],
                DIRECTORY + ITERS * SLOT + signals * SIGNAL,
                "rank {r} peer {p}: {s:?}"
            );
            // Receives: one from every other rank, each a whole slot.
            assert_eq!(s["receive_ops"], ITERS * to_another, "{s:?}");
            assert_eq!(s["receive_bytes"], ITERS * SLOT * to_another, "{s:?}");
            assert_eq!(s["failed"], 0, "{s:?}");
            assert_eq!(s["outstanding"], 0, "{s:?}");
            assert_eq!((s["flushes"], s["reconnects"]), (0, 0), "{s:?}");
            // Every request of the job was waited for, so signalled.
            assert!(
                s["completed"] >= s["send_ops"] + s["read_ops"] + s["receive_ops"] + ITERS,
                "{s:?}"
            );
        }
        let spans = [
            format!("bootstrap{{rank={r} world_size={RANKS}}}"),
            "connect{backend=ucx".to_string(),
            format!("barrier{{rank={r} ranks=[0, 1, 2, 3] algorithm=Dissemination}}"),
            format!("teardown{{rank={r} world_size={RANKS}}}"),
        ];
        for span in &spans {
            assert!(
                err.contains(span.as_str()),
                "rank {r}: no span {span}:\n{err}"
            );
        }
        for p in 0..RANKS {
            let connected = format!("connected (UCX endpoint made) peer={p}");
            assert!(err.contains(&connected), "rank {r}: {connected}?\n{err}");
            if p != r {
                let closing = format!("closing the connection peer={p}");
                assert!(err.contains(&closing), "rank {r}: {closing}?\n{err}");
            }
        }
        assert!(err.contains("barrier passed took_us="), "rank {r}:\n{err}");
    }
}
