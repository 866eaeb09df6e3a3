//! Hostile clients against rank 0 of a 4-rank `ferrovia-rank` job over UCX
//! on tcp (issue 13, part 1). Each test attacks rank 0's rendezvous, reads
//! what rank 0 costs meanwhile from /proc/PID (threads, open files, peak
//! resident memory), then starts the real ranks and requires the job to
//! complete.
#![cfg(feature = "ucx")]

mod suite;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ferrovia_node::bootstrap::{PROTOCOL_VERSION, RendezvousConfig, exchange};
use ferrovia_testkit::Cost;
use suite::{Job, RANK_BIN};

const UCX_TCP: suite::BackendEnv = &[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")];
const N: usize = 4;

/// What rank 0 may cost under attack: a rank 0 at rest measures 3 threads,
/// 17 open files and 7.5 MB here.
const MAX_THREADS: usize = 8;
const MAX_FDS: usize = 128;
const MAX_PEAK_KIB: u64 = 64 << 10;

/// A started rank whose output is read as it comes (a rank that logs a
/// lot must not block on a full pipe).
struct Rank {
    child: Child,
    out: JoinHandle<String>,
    err: JoinHandle<String>,
}

impl Rank {
    fn start(mut command: Command) -> Rank {
        let mut child = command.spawn().expect("start ferrovia-rank");
        let drain = |mut pipe: Box<dyn Read + Send>| {
            thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                String::from_utf8_lossy(&bytes).into_owned()
            })
        };
        let out = drain(Box::new(child.stdout.take().unwrap()));
        let err = drain(Box::new(child.stderr.take().unwrap()));
        Rank { child, out, err }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// (exit code, stdout, stderr); killed past `limit`.
    fn finish(mut self, limit: Duration) -> (Option<i32>, String, String) {
        let start = Instant::now();
        let code = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s.code();
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            thread::sleep(Duration::from_millis(20));
        };
        (code, self.out.join().unwrap(), self.err.join().unwrap())
    }
}

fn env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("FERROVIA_BOOTSTRAP_TIMEOUT_MS", "30000"),
        ("RUST_LOG", "warn"),
    ]
}

/// Rank 0 of a 4-rank job, listening.
fn start_root(job: &Job, wrapper: &[&str]) -> (Rank, SocketAddr) {
    let mut command = job.command(0, &["exchange", "2"], &env());
    if !wrapper.is_empty() {
        let mut wrapped = Command::new(wrapper[0]);
        wrapped
            .args(&wrapper[1..])
            .arg(RANK_BIN)
            .args(["exchange", "2"]);
        for (k, v) in command.get_envs() {
            if let Some(v) = v {
                wrapped.env(k, v);
            }
        }
        wrapped.stdout(Stdio::piped()).stderr(Stdio::piped());
        command = wrapped;
    }
    let root = Rank::start(command);
    let port = job.wait_for_port();
    (root, SocketAddr::from(([127, 0, 0, 1], port)))
}

/// The most rank 0 cost over `window`, sampled every 50 ms.
fn watch(pid: u32, window: Duration) -> Cost {
    let start = Instant::now();
    let mut worst = Cost::default();
    while start.elapsed() < window {
        if let Some(c) = Cost::of(pid) {
            worst = worst.max(c);
        }
        thread::sleep(Duration::from_millis(50));
    }
    worst
}

/// Starts ranks 1..N and requires every rank, rank 0 included, to finish
/// the exchange.
fn real_ranks_complete(job: &Job, root: Rank, what: &str) {
    let others: Vec<Rank> = (1..N)
        .map(|r| Rank::start(job.command(r, &["exchange", "2"], &env())))
        .collect();
    let mut results = vec![root.finish(Duration::from_secs(60))];
    results.extend(
        others
            .into_iter()
            .map(|r| r.finish(Duration::from_secs(60))),
    );
    for (r, (code, out, err)) in results.iter().enumerate() {
        assert_eq!(*code, Some(0), "{what}: rank {r} failed: {out}{err}");
        assert!(out.contains("verified"), "{what}: rank {r}: {out}");
    }
}

fn assert_bounded(what: &str, at_rest: Cost, worst: Cost) {
    eprintln!("{what}: rank 0 at rest {at_rest:?}, under attack {worst:?}");
    assert!(worst.threads <= MAX_THREADS, "{what}: {worst:?}");
    assert!(worst.fds <= MAX_FDS, "{what}: {worst:?}");
    assert!(worst.peak_kib <= MAX_PEAK_KIB, "{what}: {worst:?}");
}

/// A frame header of this protocol version declaring `len` body bytes.
fn header(len: u32) -> Vec<u8> {
    let mut h = b"FRVB".to_vec();
    h.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    h.extend_from_slice(&len.to_le_bytes());
    h
}

/// A `Table` frame (protocol 1's variant 2) carrying one blob of `len`
/// bytes: what only rank 0 should ever send.
fn table_frame(len: usize) -> Vec<u8> {
    let mut body = vec![2u8, 1];
    let mut v = len as u64;
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            body.push(byte);
            break;
        }
        body.push(byte | 0x80);
    }
    body.resize(body.len() + len, 0xab);
    let mut f = header(body.len() as u32);
    f.extend(body);
    f
}

/// Idle connections: `count` of them, held open.
fn idle_connections(addr: SocketAddr, count: usize) -> Vec<TcpStream> {
    (0..count)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok())
        .collect()
}

#[test]
fn two_thousand_idle_connections_cost_rank_0_no_thread() {
    let job = Job::new(RANK_BIN, N, UCX_TCP);
    let (root, addr) = start_root(&job, &[]);
    let at_rest = Cost::of(root.pid()).unwrap();
    let idle = idle_connections(addr, 2000);
    let worst = watch(root.pid(), Duration::from_secs(1));
    assert_bounded("2,000 idle connections", at_rest, worst);
    real_ranks_complete(&job, root, "2,000 idle connections");
    drop(idle);
}

#[test]
fn idle_connections_beyond_rank_0s_open_file_limit_do_not_kill_it() {
    let job = Job::new(RANK_BIN, N, UCX_TCP);
    let limit = ["sh", "-c", r#"ulimit -n 1024 && exec "$0" "$@""#];
    let (root, addr) = start_root(&job, &limit);
    let at_rest = Cost::of(root.pid()).unwrap();
    let idle = idle_connections(addr, 1100);
    let worst = watch(root.pid(), Duration::from_secs(1));
    assert_bounded("1,100 idle connections, 1,024 files", at_rest, worst);
    real_ranks_complete(&job, root, "1,100 idle connections, 1,024 files");
    drop(idle);
}

#[test]
fn sixteen_bodies_of_64_mib_do_not_grow_rank_0() {
    let job = Job::new(RANK_BIN, N, UCX_TCP);
    let (root, addr) = start_root(&job, &[]);
    let at_rest = Cost::of(root.pid()).unwrap();
    let len = (64u32 << 20) - 1;
    let senders: Vec<JoinHandle<TcpStream>> = (0..16)
        .map(|_| {
            thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                let chunk = vec![0u8; 1 << 20];
                let mut sent = s.write_all(&header(len)).map(|()| 0usize);
                while let Ok(n) = sent {
                    if n >= len as usize {
                        break;
                    }
                    let part = &chunk[..chunk.len().min(len as usize - n)];
                    sent = s.write_all(part).map(|()| n + part.len());
                }
                s
            })
        })
        .collect();
    let held: Vec<TcpStream> = senders.into_iter().map(|h| h.join().unwrap()).collect();
    let worst = watch(root.pid(), Duration::from_secs(1));
    assert_bounded("16 bodies of 64 MiB", at_rest, worst);
    real_ranks_complete(&job, root, "16 bodies of 64 MiB");
    drop(held);
}

#[test]
fn a_refusal_and_its_log_line_are_small_whatever_was_sent() {
    let job = Job::new(RANK_BIN, N, UCX_TCP);
    let (root, addr) = start_root(&job, &[]);
    let at_rest = Cost::of(root.pid()).unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    let _ = s.write_all(&table_frame(63 << 20));
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let worst = watch(root.pid(), Duration::from_millis(500));
    eprintln!("a 63 MiB table frame: refused with {} bytes", answer.len());
    assert!(answer.len() <= 512, "a {}-byte refusal", answer.len());
    assert_bounded("a 63 MiB table frame", at_rest, worst);
    let pid = root.pid();
    let others: Vec<Rank> = (1..N)
        .map(|r| Rank::start(job.command(r, &["exchange", "2"], &env())))
        .collect();
    let (code, _, err) = root.finish(Duration::from_secs(60));
    for r in others {
        assert_eq!(r.finish(Duration::from_secs(60)).0, Some(0));
    }
    assert_eq!(code, Some(0), "rank 0 ({pid}) failed: {err:.2000}");
    let longest = err.lines().map(str::len).max().unwrap_or(0);
    eprintln!("rank 0 logged {} bytes, longest line {longest}", err.len());
    assert!(longest <= 512, "a {longest}-byte log line");
    assert!(err.contains("refused"), "the refusal was not logged: {err}");
}

#[test]
fn a_stranger_that_never_reads_its_refusal_does_not_stall_the_job() {
    let job = Job::new(RANK_BIN, N, UCX_TCP);
    let (root, addr) = start_root(&job, &[]);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(&table_frame(4 << 20));
    // Never read; keep the connection open while the job runs. Rank 0 has
    // the frame before the real ranks come.
    thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    real_ranks_complete(&job, root, "an unread refusal");
    eprintln!(
        "an unread refusal: the job completed in {:?}",
        started.elapsed()
    );
    drop(s);
}

/// A stranger checking in as rank 1 with the token a job without one used
/// to fall back on.
fn default_token_stranger(addr: SocketAddr) -> JoinHandle<Result<Vec<Vec<u8>>, String>> {
    thread::spawn(move || {
        let cfg = RendezvousConfig::new(1, N, addr.to_string(), "ferrovia-default-token")
            .timeout(Duration::from_secs(10));
        exchange(&cfg, vec![vec![0xee]; N])
            .map(|(_, table)| table)
            .map_err(|e| e.to_string())
    })
}

#[test]
fn a_job_without_a_token_is_not_joined_with_a_public_default() {
    // Rank 0 is not expected to listen: any port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let job = Job::at_port(RANK_BIN, N, UCX_TCP, port);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let no_token = |r: usize| {
        let mut c = job.command(r, &["exchange", "2"], &env());
        c.env_remove("FERROVIA_JOB_TOKEN");
        Rank::start(c)
    };
    let mut ranks = vec![no_token(0)];
    thread::sleep(Duration::from_millis(500));
    let stranger = default_token_stranger(addr);
    ranks.extend([2, 3].map(no_token));
    let got = stranger.join().unwrap();
    assert!(got.is_err(), "a stranger got the job's table: {got:?}");
    let (code, _, err) = ranks.remove(0).finish(Duration::from_secs(40));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("FERROVIA_JOB_TOKEN"), "{err}");
    for r in ranks {
        r.finish(Duration::from_secs(40));
    }
}

#[test]
fn rank_0_listens_only_on_the_address_configured() {
    let job = Job::new(RANK_BIN, N, UCX_TCP);
    let (root, _) = start_root(&job, &[]);
    // 127.0.0.2 is this host too, but not the address configured.
    let elsewhere = SocketAddr::from(([127, 0, 0, 2], job.port()));
    let probe = TcpStream::connect_timeout(&elsewhere, Duration::from_secs(2));
    assert!(probe.is_err(), "rank 0 listens beyond 127.0.0.1");
    real_ranks_complete(&job, root, "a loopback rendezvous");
}

/// A job that starts itself (`Node::from_env_or_launch`, here through
/// `ferrovia-rank --launch`) has a random token: a stranger with the old
/// default is refused, and the job completes.
#[test]
fn a_local_launch_has_a_token_of_its_own() {
    let mut c = Command::new(RANK_BIN);
    c.args(["--launch", "4", "exchange", "2"])
        .envs(UCX_TCP.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in [
        "FERROVIA_RANK",
        "FERROVIA_JOB_TOKEN",
        "RANK",
        "SLURM_PROCID",
    ] {
        c.env_remove(var);
    }
    let mut launcher = c.spawn().unwrap();
    // The launcher says where rank 0 listens before it starts the others.
    let mut err = std::io::BufReader::new(launcher.stderr.take().unwrap());
    let mut line = String::new();
    let port: u16 = loop {
        line.clear();
        assert!(
            std::io::BufRead::read_line(&mut err, &mut line).unwrap() > 0,
            "the launcher said nothing"
        );
        if let Some((_, at)) = line.split_once("meeting at 127.0.0.1:") {
            break at.trim().parse().unwrap();
        }
    };
    let refused = default_token_stranger(SocketAddr::from(([127, 0, 0, 1], port)))
        .join()
        .unwrap();
    assert!(refused.is_err(), "a stranger joined: {refused:?}");
    let out = launcher.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert_eq!(stdout.matches("verified").count(), N, "{stdout}");
}
