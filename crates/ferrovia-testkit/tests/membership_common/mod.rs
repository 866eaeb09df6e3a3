//! Store-backed jobs (etcd) of `ferrovia-rank member`, for the membership
//! tests and the replacement benchmark: each test starts its own etcd.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) use ferrovia_testkit::{BackendEnv, Etcd, finish};

pub(crate) const RANK_BIN: &str = env!("CARGO_BIN_EXE_ferrovia-rank");

/// Microseconds since the epoch (the ranks stamp their lines so).
pub(crate) fn wall_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros()
}

/// One rank process of a store-backed job, its stdout lines forwarded.
pub(crate) struct Member {
    pub(crate) child: Child,
    pub(crate) lines: mpsc::Receiver<String>,
    pub(crate) seen: Vec<String>,
}

impl Member {
    /// Rank `rank` of `n` in `url`'s job, running `args`.
    pub(crate) fn spawn(
        url: &str,
        rank: usize,
        n: usize,
        args: &[&str],
        b: BackendEnv,
        extra: &[(&str, &str)],
    ) -> Member {
        let mut c = Command::new(RANK_BIN);
        c.args(args)
            .env("FERROVIA_STORE", url)
            .env("FERROVIA_RANK", rank.to_string())
            .env("FERROVIA_WORLD_SIZE", n.to_string())
            .env_remove("FERROVIA_JOB_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in b.iter().chain(extra) {
            c.env(k, v);
        }
        let mut child = c.spawn().expect("ferrovia-rank");
        let out = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Member {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits up to `limit` for a line containing `what`.
    pub(crate) fn wait_line(&mut self, what: &str, limit: Duration) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.contains(what)) {
            return l.clone();
        }
        loop {
            match self.lines.recv_timeout(limit) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(what) {
                        return l;
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    let (_, out, err) = finish_member(self);
                    panic!("no {what:?} within {limit:?}:\n{out}\n{err}");
                }
            }
        }
    }
}

/// Waits for the process (at most 120 s): (exit code, all stdout, stderr).
pub(crate) fn finish_member(m: &mut Member) -> (Option<i32>, String, String) {
    let child = std::mem::replace(
        &mut m.child,
        Command::new("true").spawn().expect("a placeholder process"),
    );
    let (code, _, err) = finish(child, Duration::from_secs(120));
    while let Ok(l) = m.lines.recv_timeout(Duration::from_millis(200)) {
        m.seen.push(l);
    }
    (code, m.seen.join("\n"), err)
}

/// The stamp of a line `... at US`.
pub(crate) fn stamp(line: &str) -> u128 {
    line.rsplit(" at ")
        .next()
        .and_then(|us| us.trim().parse().ok())
        .unwrap_or_else(|| panic!("no stamp in {line:?}"))
}

/// The replacement scenario: 4 members meet in a fresh etcd, rank 2 is
/// killed, a new process takes its place (started at once, waiting for
/// the rank to come free), every survivor admits it, and all four run a
/// checked round and a barrier. Returns (kill → every survivor's Left
/// event, slowest, ms; kill → every rank past the barrier, ms).
pub(crate) fn replace_rank_two(b: BackendEnv, ttl_ms: u64) -> (u128, u128) {
    let etcd = Etcd::start();
    let url = etcd.url("replace");
    let n = 4;
    let ttl = ttl_ms.to_string();
    let env = [("FERROVIA_STORE_TTL_MS", ttl.as_str())];
    let mut members: Vec<Member> = (0..n)
        .map(|r| Member::spawn(&url, r, n, &["member", "--victim", "2"], b, &env))
        .collect();
    let wait = Duration::from_secs(120);
    for (r, m) in members.iter_mut().enumerate() {
        let what = if r == 2 {
            "sent stale messages"
        } else {
            "ready at"
        };
        m.wait_line(what, wait);
    }
    members[2].child.kill().expect("kill rank 2");
    let killed = wall_us();
    let _ = members[2].child.wait();
    let claim = [
        ("FERROVIA_STORE_TTL_MS", ttl.as_str()),
        ("FERROVIA_STORE_CLAIM_WAIT_MS", "30000"),
    ];
    members[2] = Member::spawn(&url, 2, n, &["member", "--replacement"], b, &claim);
    let mut left_ms = 0;
    let mut passed_ms = 0;
    let results: Vec<_> = members.iter_mut().map(finish_member).collect();
    let all: String = results
        .iter()
        .enumerate()
        .map(|(r, (code, out, err))| format!("--- rank {r} ({code:?}):\n{out}\n{err}\n"))
        .collect();
    for (r, (code, out, _)) in results.iter().enumerate() {
        assert_eq!(*code, Some(0), "rank {r} failed:\n{all}");
        assert!(
            out.contains("verified (met through etcd"),
            "rank {r}: {out}"
        );
        let passed = out
            .lines()
            .find(|l| l.contains("barrier with every rank passed"))
            .unwrap_or_else(|| panic!("rank {r}: {out}"));
        passed_ms = passed_ms.max((stamp(passed) - killed) / 1000);
        if r == 2 {
            continue;
        }
        let left = out
            .lines()
            .find(|l| l.contains("event Left { rank: 2"))
            .unwrap_or_else(|| panic!("rank {r}: {out}"));
        assert!(left.contains("reason: LeaseExpired"), "{left}");
        left_ms = left_ms.max((stamp(left) - killed) / 1000);
        let send = out
            .lines()
            .find(|l| l.contains("a send to the departed rank"))
            .unwrap_or_default();
        assert!(send.contains("Err") && send.contains("peer 2"), "{send}");
        assert!(out.contains("admitted rank 2"), "{out}");
        // Over UCX the victim's four messages to each survivor, queued
        // before it died, were dropped as stale, none delivered (round
        // 1's checks would have failed on one).
        let stale = out
            .lines()
            .find(|l| l.contains("stale messages dropped"))
            .unwrap_or_default();
        println!("{stale}");
        if b.contains(&("FERROVIA_BACKEND", "ucx")) {
            assert!(stale.ends_with("dropped: 4"), "{stale}");
        }
    }
    drop(etcd);
    (left_ms, passed_ms)
}
