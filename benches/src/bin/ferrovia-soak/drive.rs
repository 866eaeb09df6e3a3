//! The soak's driver: starts the ranks on this host, samples their
//! resources, sends garbage to their ports, and reports.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::garbage;
use crate::procfs::{self, Cost};
use crate::rounds::Rng;

/// What the driver was asked for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) ranks: usize,
    pub(crate) seconds: u64,
    pub(crate) garbage_ms: u64,
    pub(crate) spare_ucx_ports: bool,
    pub(crate) seed: u64,
}

/// How much a resource's floor may grow from the first minute to the last
/// (see `ends`).
const MORE_THREADS: u64 = 2;
const MORE_FDS: u64 = 4;
const MORE_RSS_KIB: u64 = 16 * 1024;

/// What the driver learns of one rank.
#[derive(Default)]
struct Seen {
    pid: u32,
    /// ferrovia's own ports (control port, rank 0's listener).
    ports: Vec<SocketAddr>,
    report: BTreeMap<String, String>,
    out: Vec<String>,
    err: String,
    samples: Vec<(Duration, Cost)>,
    /// Its open files by kind, a minute in and at the latest look (every
    /// 10 s), printed for a rank whose files grew.
    kinds_first: BTreeMap<String, u64>,
    kinds_last: BTreeMap<String, u64>,
}

fn token() -> String {
    let mut b = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut b);
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn spawn(
    plan: &Plan,
    rank: usize,
    token: &str,
    rendezvous: &str,
    port_file: Option<&str>,
) -> Child {
    let exe = std::env::current_exe().expect("the soak's own path");
    let mut c = Command::new(exe);
    c.args([
        "rank",
        "--seconds",
        &plan.seconds.to_string(),
        "--seed",
        &plan.seed.to_string(),
    ])
    .env("FERROVIA_RANK", rank.to_string())
    .env("FERROVIA_WORLD_SIZE", plan.ranks.to_string())
    .env("FERROVIA_JOB_TOKEN", token)
    .env("FERROVIA_RENDEZVOUS", rendezvous)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if let Some(f) = port_file {
        c.env("FERROVIA_RENDEZVOUS_PORT_FILE", f);
    }
    c.spawn().expect("start a soak rank")
}

fn wait_for_port(file: &str) -> Option<u16> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some(p) = std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            let _ = std::fs::remove_file(file);
            return Some(p);
        }
        thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Reads a rank's output into `seen` as it comes.
fn read_output(child: &mut Child, seen: Arc<Mutex<Seen>>) -> Vec<thread::JoinHandle<()>> {
    let out = child.stdout.take().expect("piped stdout");
    let err = child.stderr.take().expect("piped stderr");
    let s2 = seen.clone();
    vec![
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(rest) = line.strip_prefix("soak-ports ") {
                    for kv in rest.split_whitespace() {
                        if let Some(ports) = kv.strip_prefix("ports=") {
                            s.ports = ports.split(',').filter_map(|p| p.parse().ok()).collect();
                        }
                    }
                } else if let Some(rest) = line.strip_prefix("soak-report ") {
                    for kv in rest.split_whitespace() {
                        if let Some((k, v)) = kv.split_once('=') {
                            s.report.insert(k.to_owned(), v.to_owned());
                        }
                    }
                }
                s.out.push(line);
            }
        }),
        thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(err).read_to_string(&mut text);
            s2.lock().unwrap_or_else(|p| p.into_inner()).err = text;
        }),
    ]
}

pub(crate) fn run(plan: Plan) -> ExitCode {
    let n = plan.ranks.max(1);
    let plan = Plan { ranks: n, ..plan };
    let token = token();
    let port_file = std::env::temp_dir().join(format!("ferrovia-soak-{}.port", std::process::id()));
    let port_file = port_file.to_string_lossy().into_owned();
    println!(
        "soak: {n} ranks for {} s (FERROVIA_BACKEND={}, UCX_TLS={}), garbage every {} ms{}",
        plan.seconds,
        std::env::var("FERROVIA_BACKEND").unwrap_or_default(),
        std::env::var("UCX_TLS").unwrap_or_else(|_| "unset".into()),
        plan.garbage_ms,
        if plan.spare_ucx_ports {
            ", UCX's own ports spared"
        } else {
            ""
        }
    );
    let seen: Vec<Arc<Mutex<Seen>>> = (0..n).map(|_| Arc::default()).collect();
    let mut children = Vec::with_capacity(n);
    let mut readers = Vec::new();
    let mut first = spawn(&plan, 0, &token, "127.0.0.1:0", Some(&port_file));
    readers.extend(read_output(&mut first, seen[0].clone()));
    seen[0].lock().unwrap_or_else(|p| p.into_inner()).pid = first.id();
    children.push(first);
    let Some(port) = wait_for_port(&port_file) else {
        eprintln!("soak: rank 0 never reported its port");
        for c in &mut children {
            let _ = c.kill();
        }
        return ExitCode::FAILURE;
    };
    for (r, s) in seen.iter().enumerate().skip(1) {
        let mut c = spawn(&plan, r, &token, &format!("127.0.0.1:{port}"), None);
        readers.extend(read_output(&mut c, s.clone()));
        s.lock().unwrap_or_else(|p| p.into_inner()).pid = c.id();
        children.push(c);
    }
    let started = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let thrown = Arc::new(Mutex::new(vec![0u64; garbage::KINDS.len()]));
    let thrower = (plan.garbage_ms > 0).then(|| {
        let (seen, done, thrown) = (seen.clone(), done.clone(), thrown.clone());
        thread::spawn(move || throw(plan, &seen, &done, &thrown))
    });
    // Sample every rank each second until all have exited, or the
    // deadline: past it, a rank still running is a hang.
    let deadline = started + Duration::from_secs(plan.seconds + 180);
    let mut status: Vec<Option<std::process::ExitStatus>> = vec![None; n];
    let mut hangs = 0;
    loop {
        for (r, c) in children.iter_mut().enumerate() {
            if status[r].is_none() {
                status[r] = c.try_wait().ok().flatten();
            }
            let mut s = seen[r].lock().unwrap_or_else(|p| p.into_inner());
            if status[r].is_none()
                && let Some(cost) = Cost::of(s.pid)
            {
                let at = started.elapsed();
                s.samples.push((at, cost));
                if s.samples.len().is_multiple_of(10) {
                    let kinds = procfs::fd_kinds(s.pid);
                    if s.kinds_first.is_empty() && at >= kinds_at(plan.seconds) {
                        s.kinds_first = kinds.clone();
                    }
                    s.kinds_last = kinds;
                }
            }
        }
        if status.iter().all(Option::is_some) {
            break;
        }
        if Instant::now() >= deadline {
            for (r, c) in children.iter_mut().enumerate() {
                if status[r].is_none() {
                    hangs += 1;
                    eprintln!("soak: rank {r} still running at the deadline: a hang");
                    let _ = c.kill();
                    status[r] = c.wait().ok();
                }
            }
            break;
        }
        thread::sleep(Duration::from_secs(1));
    }
    done.store(true, Ordering::Relaxed);
    if let Some(t) = thrower {
        let _ = t.join();
    }
    for r in readers {
        let _ = r.join();
    }
    report(
        &plan,
        &seen,
        &status,
        hangs,
        &thrown.lock().unwrap_or_else(|p| p.into_inner()),
        started.elapsed(),
    )
}

/// Sends garbage to a random rank's random listening port, every
/// `garbage_ms`, until `done`.
fn throw(plan: Plan, seen: &[Arc<Mutex<Seen>>], done: &AtomicBool, thrown: &Mutex<Vec<u64>>) {
    let mut rng = Rng::new(plan.seed ^ 0x50a4);
    while !done.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(plan.garbage_ms));
        let r = rng.below(seen.len() as u64) as usize;
        let (pid, ours) = {
            let s = seen[r].lock().unwrap_or_else(|p| p.into_inner());
            (s.pid, s.ports.clone())
        };
        let ports: Vec<SocketAddr> = procfs::listening(pid)
            .into_iter()
            .filter(|p| p.ip().is_loopback())
            .filter(|p| !plan.spare_ucx_ports || ours.contains(p))
            .collect();
        if ports.is_empty() {
            continue;
        }
        let at = ports[rng.below(ports.len() as u64) as usize];
        let kind = rng.below(garbage::KINDS.len() as u64) as usize;
        if garbage::send(at, kind, &mut rng) {
            thrown.lock().unwrap_or_else(|p| p.into_inner())[kind] += 1;
        }
    }
}

fn num(s: &Seen, key: &str) -> u64 {
    s.report.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The floor of each resource (its least value) over the minute from the
/// first minute on (a fifth of a shorter run, at least 5 s in), and over
/// the run's last minute. Sockets in flight (garbage, clients by address,
/// UCX connections being made or torn down for a reconnect) come and go
/// from one sample to the next; a leak raises the floor. (Comparing two
/// single samples flagged a 30 min run whose fds went 26 -> 33 on one rank
/// over 3,000 reconnects and 15,000 clients.)
fn ends(samples: &[(Duration, Cost)], seconds: u64) -> Option<(Cost, Cost)> {
    let at = kinds_at(seconds);
    let end = samples.last()?.0;
    let first = floor(
        samples
            .iter()
            .filter(|(t, _)| *t >= at && *t < at + at)
            .map(|(_, c)| *c),
    )
    .or(samples.first().map(|(_, c)| *c))?;
    let last = floor(
        samples
            .iter()
            .filter(|(t, _)| *t + at >= end)
            .map(|(_, c)| *c),
    )?;
    Some((first, last))
}

/// When the first minute's floor starts (a fifth of a shorter run, at
/// least 5 s in).
fn kinds_at(seconds: u64) -> Duration {
    Duration::from_secs(60.min((seconds / 5).max(5)))
}

/// Whether a rank's resources stayed flat from `first` to `last` (floors),
/// in a job of `ranks`. Files other than TCP connections may grow by
/// [`MORE_FDS`]; TCP connections up to what a job of that size holds at
/// most: UCX's tcp transport keeps one or two connections per peer (one
/// per direction, depending on which side's endpoint connected first
/// after each reconnect) and a pair for this rank's own endpoint, so a
/// 30 min run's floor drifts from one toward two per peer (25 -> 30 files
/// on one of 8 ranks) and stops there; more than that is a leak.
fn flat(first: Cost, last: Cost, ranks: usize) -> bool {
    let most_tcp = (2 * ranks as u64).max(first.tcp + MORE_FDS);
    last.threads <= first.threads + MORE_THREADS
        && last.other_files <= first.other_files + MORE_FDS
        && last.tcp <= most_tcp
        && last.rss_kib <= first.rss_kib + MORE_RSS_KIB
}

fn floor(costs: impl Iterator<Item = Cost>) -> Option<Cost> {
    costs.reduce(|a, b| Cost {
        threads: a.threads.min(b.threads),
        fds: a.fds.min(b.fds),
        tcp: a.tcp.min(b.tcp),
        other_files: a.other_files.min(b.other_files),
        rss_kib: a.rss_kib.min(b.rss_kib),
    })
}

fn report(
    plan: &Plan,
    seen: &[Arc<Mutex<Seen>>],
    status: &[Option<std::process::ExitStatus>],
    hangs: usize,
    thrown: &[u64],
    took: Duration,
) -> ExitCode {
    let mut ok = hangs == 0;
    let (mut messages, mut writes, mut wrong, mut lost) = (0, 0, 0, 0);
    let (mut reconnects, mut stale, mut flushes, mut clients) = (0, 0, 0, 0);
    let (mut async_ops, mut dropped, mut barriers) = (0, 0, 0);
    println!(
        "rank  exit   rounds  messages  reconnects  threads (floor: 1st min -> last min)  fds          RSS KiB"
    );
    for (r, s) in seen.iter().enumerate() {
        let s = s.lock().unwrap_or_else(|p| p.into_inner());
        let exit_ok = status[r].is_some_and(|st| st.success());
        if !exit_ok || s.report.is_empty() {
            ok = false;
            lost += 1; // its messages are unaccounted for
            eprintln!(
                "soak: rank {r} ended {:?}:\n{}\n{}",
                status[r],
                s.out.join("\n"),
                s.err
            );
        }
        messages += num(&s, "messages");
        writes += num(&s, "writes");
        wrong += num(&s, "wrong");
        lost += num(&s, "lost");
        reconnects += num(&s, "reconnects");
        stale += num(&s, "stale_dropped");
        flushes += num(&s, "flushes");
        clients += num(&s, "clients");
        async_ops += num(&s, "async_ops");
        dropped += num(&s, "async_dropped");
        barriers += num(&s, "barriers");
        let (first, last) = ends(&s.samples, plan.seconds).unwrap_or_default();
        let flat = flat(first, last, plan.ranks);
        if !flat {
            ok = false;
        }
        println!(
            "{r:>4}  {:<5}  {:>6}  {:>8}  {:>10}  {:>4} -> {:<4}{}            {:>3} -> {:<3} (tcp {} -> {})   {:>6} -> {:<6}",
            status[r]
                .and_then(|st| st.code())
                .map_or("-".into(), |c| c.to_string()),
            num(&s, "rounds"),
            num(&s, "messages"),
            num(&s, "reconnects"),
            first.threads,
            last.threads,
            if flat { "" } else { " GREW" },
            first.fds,
            last.fds,
            first.tcp,
            last.tcp,
            first.rss_kib,
            last.rss_kib
        );
        if last.fds > first.fds {
            let show = |k: &BTreeMap<String, u64>| {
                k.iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            println!(
                "      rank {r}'s files, a minute in: {}; at the end: {}",
                show(&s.kinds_first),
                show(&s.kinds_last)
            );
        }
    }
    let garbage: Vec<String> = garbage::KINDS
        .iter()
        .zip(thrown)
        .map(|(k, n)| format!("{k}: {n}"))
        .collect();
    println!("garbage sent: {}", garbage.join(", "));
    ok &= wrong == 0 && lost == 0;
    println!(
        "soak: {} in {:.0} s: messages {messages}, writes {writes}, lost {lost}, wrong {wrong}, hangs {hangs}; \
         flushes {flushes}, reconnects {reconnects}, stale dropped {stale}, barriers {barriers}, clients {clients}, \
         async ops {async_ops} ({dropped} futures dropped); resources {}",
        if ok { "PASSED" } else { "FAILED" },
        took.as_secs_f64(),
        if ok { "flat" } else { "see above" }
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(tcp: u64, other_files: u64) -> Cost {
        Cost {
            threads: 3,
            fds: tcp + other_files,
            tcp,
            other_files,
            rss_kib: 10_000,
        }
    }

    #[test]
    fn connections_may_grow_to_two_per_peer_and_other_files_may_not() {
        // 8 ranks: one connection per peer at first, two per peer later.
        assert!(flat(cost(9, 16), cost(14, 16), 8));
        assert!(flat(cost(9, 16), cost(16, 17), 8));
        assert!(!flat(cost(9, 16), cost(17, 16), 8), "more than UCX holds");
        assert!(!flat(cost(9, 16), cost(9, 21), 8), "a file leak");
        let mut fat = cost(9, 16);
        fat.rss_kib += MORE_RSS_KIB + 1;
        assert!(!flat(cost(9, 16), fat, 8));
    }
}
