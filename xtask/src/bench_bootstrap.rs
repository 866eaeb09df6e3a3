//! `cargo xtask bench bootstrap`: how long ranks take to meet over each
//! bootstrap engine (rank 0's rendezvous, PMIx under `mpirun`, etcd), for
//! 2, 4 and 8 ranks on this host over UCX, all in one run; and how long a
//! store-backed job takes to replace a killed member (from the kill to all
//! four ranks past a barrier again). Builds `ferrovia-rank` optimized and
//! starts its own etcd (Debian's etcd-server) on loopback.
//!
//! Each rank prints how long its node's build took and when it was
//! connected (`ferrovia-rank bootstrap`): the table gives the medians of
//! [`RUNS`] runs of the time from starting the job (spawning the ranks,
//! or `mpirun`) to the last rank connected, and of the slowest rank's
//! build (the meeting itself, without process start-up or `mpirun`'s).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::cargo_artifacts::{self, RANK};
use crate::failure::{Failure, Result};
use crate::{deps, workspace};

/// The rows.
const RANK_COUNTS: [usize; 3] = [2, 4, 8];
/// Runs per cell (the median is shown).
const RUNS: usize = 3;
/// The lease of the etcd members in the replacement runs.
const TTL_MS: u64 = 2000;
/// One job's bound.
const JOB_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Rendezvous,
    Pmix,
    Etcd,
}

impl Engine {
    const ALL: [Engine; 3] = [Engine::Rendezvous, Engine::Pmix, Engine::Etcd];

    fn name(self) -> &'static str {
        match self {
            Engine::Rendezvous => "built-in rendezvous",
            Engine::Pmix => "PMIx (mpirun)",
            Engine::Etcd => "etcd",
        }
    }
}

fn wall_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros()
}

fn free_port() -> Result<u16> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Failure::new(format!("a free loopback port: {e}")))
}

/// A process whose stdout lines arrive on a channel.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Proc {
    fn spawn(mut c: Command) -> Result<Proc> {
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Failure::new(format!("spawn {:?}: {e}", c.get_program())))?;
        let out = child
            .stdout
            .take()
            .ok_or_else(|| Failure::new("no stdout"))?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out)
                .lines()
                .map_while(std::result::Result::ok)
            {
                let _ = tx.send(l);
            }
        });
        Ok(Proc {
            child,
            lines,
            seen: Vec::new(),
        })
    }

    /// Waits for a line containing `what` until `deadline`.
    fn wait_line(&mut self, what: &str, deadline: Instant) -> Result<String> {
        if let Some(l) = self.seen.iter().find(|l| l.contains(what)) {
            return Ok(l.clone());
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(what) => {
                    self.seen.push(l.clone());
                    return Ok(l);
                }
                Ok(l) => self.seen.push(l),
                Err(_) => {
                    let _ = self.child.kill();
                    return Err(Failure::new(format!(
                        "no {what:?} in time; got:\n{}",
                        self.seen.join("\n")
                    )));
                }
            }
        }
    }

    /// Waits for the exit until `deadline` (killed past it): all lines.
    fn finish(&mut self, deadline: Instant) -> Result<Vec<String>> {
        loop {
            if let Some(status) = self.child.try_wait().ok().flatten() {
                while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(100)) {
                    self.seen.push(l);
                }
                if !status.success() {
                    return Err(Failure::new(format!(
                        "a rank exited with {status}:\n{}",
                        self.seen.join("\n")
                    )));
                }
                return Ok(self.seen.clone());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Err(Failure::new("a job overran its bound"));
            }
            while let Ok(l) = self.lines.try_recv() {
                self.seen.push(l);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private etcd on loopback, gone with its data when dropped.
struct Etcd {
    proc: Option<Proc>,
    dir: PathBuf,
    port: u16,
}

impl Etcd {
    fn start() -> Result<Etcd> {
        let dir = std::env::temp_dir().join(format!("ferrovia-bench-etcd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (port, peer) = (free_port()?, free_port()?);
        let client = format!("http://127.0.0.1:{port}");
        let peer = format!("http://127.0.0.1:{peer}");
        let mut c = Command::new("etcd");
        c.arg("--name=bench")
            .arg(format!("--data-dir={}", dir.display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=bench={peer}"));
        let etcd = Etcd {
            proc: Some(Proc::spawn(c)?),
            dir,
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let healthy = Command::new("etcdctl")
                .arg(format!("--endpoints={client}"))
                .args(["--command-timeout=1s", "endpoint", "health"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if healthy {
                return Ok(etcd);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(Failure::new("etcd did not come up within 30 s"))
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.proc.take();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One rank process, its engine's variables set.
fn rank(program: &Path, args: &[&str], vars: &[(String, String)]) -> Command {
    let mut c = Command::new(program);
    c.args(args).env("FERROVIA_BACKEND", "ucx");
    for v in [
        "FERROVIA_RANK",
        "FERROVIA_WORLD_SIZE",
        "FERROVIA_RENDEZVOUS",
        "FERROVIA_STORE",
        "FERROVIA_JOB_TOKEN",
        "FERROVIA_HOSTFILE",
    ] {
        c.env_remove(v);
    }
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

fn vars(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// One job's bootstrap: (launch to the last rank connected, the slowest
/// rank's build), in ms.
fn bootstrap_once(
    program: &Path,
    engine: Engine,
    n: usize,
    etcd: &Etcd,
    run: usize,
) -> Result<(f64, f64)> {
    let job = format!("bench-{}-{n}-{run}-{:?}", std::process::id(), engine);
    let started = wall_us();
    let mut procs = Vec::new();
    match engine {
        Engine::Pmix => {
            let mut c = Command::new("mpirun");
            c.args([
                "--allow-run-as-root",
                "--oversubscribe",
                "-np",
                &n.to_string(),
            ])
            .args(["-x", "FERROVIA_BACKEND=ucx"])
            .arg(program)
            .arg("bootstrap");
            procs.push(Proc::spawn(c)?);
        }
        _ => {
            let at = format!("127.0.0.1:{}", free_port()?);
            let store = format!("etcd://127.0.0.1:{}/{job}", etcd.port);
            for r in 0..n {
                let mut v = vec![
                    ("FERROVIA_RANK", r.to_string()),
                    ("FERROVIA_WORLD_SIZE", n.to_string()),
                ];
                if engine == Engine::Rendezvous {
                    v.push(("FERROVIA_RENDEZVOUS", at.clone()));
                    v.push(("FERROVIA_JOB_TOKEN", job.clone()));
                } else {
                    v.push(("FERROVIA_STORE", store.clone()));
                }
                procs.push(Proc::spawn(rank(program, &["bootstrap"], &vars(&v)))?);
            }
        }
    }
    let deadline = Instant::now() + JOB_TIMEOUT;
    let mut lines = Vec::new();
    for p in &mut procs {
        lines.extend(p.finish(deadline)?);
    }
    let (mut last, mut slowest) = (0u128, 0u128);
    let mut seen = 0;
    for l in lines.iter().filter(|l| l.contains(": bootstrap ")) {
        let num = |after: &str| -> Option<u128> {
            l.split(after)
                .nth(1)?
                .split(' ')
                .next()?
                .trim()
                .parse()
                .ok()
        };
        slowest = slowest.max(num("bootstrap ").unwrap_or(0));
        last = last.max(num("connected at ").unwrap_or(0));
        seen += 1;
    }
    if seen != n {
        return Err(Failure::new(format!(
            "{seen} of {n} ranks reported:\n{}",
            lines.join("\n")
        )));
    }
    Ok((
        last.saturating_sub(started) as f64 / 1000.0,
        slowest as f64 / 1000.0,
    ))
}

/// One replacement: four members, rank 2 killed, a new process (started
/// at once, waiting for the rank) admitted by the survivors. (kill to
/// every survivor's Left event, kill to all four past the barrier), ms.
fn replace_once(program: &Path, etcd: &Etcd, run: usize) -> Result<(f64, f64)> {
    let url = format!(
        "etcd://127.0.0.1:{}/bench-replace-{}-{run}",
        etcd.port,
        std::process::id()
    );
    let member = |r: usize, args: &[&str], claim: bool| {
        let mut v = vec![
            ("FERROVIA_RANK", r.to_string()),
            ("FERROVIA_WORLD_SIZE", "4".to_owned()),
            ("FERROVIA_STORE", url.clone()),
            ("FERROVIA_STORE_TTL_MS", TTL_MS.to_string()),
        ];
        if claim {
            v.push(("FERROVIA_STORE_CLAIM_WAIT_MS", "30000".to_owned()));
        }
        Proc::spawn(rank(program, args, &vars(&v)))
    };
    let mut procs = (0..4)
        .map(|r| member(r, &["member", "--victim", "2"], false))
        .collect::<Result<Vec<_>>>()?;
    let deadline = Instant::now() + JOB_TIMEOUT;
    for (r, p) in procs.iter_mut().enumerate() {
        p.wait_line(
            if r == 2 {
                "sent stale messages"
            } else {
                "ready at"
            },
            deadline,
        )?;
    }
    let _ = procs[2].child.kill();
    let killed = wall_us();
    let _ = procs[2].child.wait();
    procs[2] = member(2, &["member", "--replacement"], true)?;
    let (mut left, mut passed) = (0u128, 0u128);
    let stamp = |l: &str| -> u128 {
        l.rsplit(" at ")
            .next()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    for (r, p) in procs.iter_mut().enumerate() {
        let lines = p.finish(deadline)?;
        let find = |what: &str| lines.iter().find(|l| l.contains(what)).map(|l| stamp(l));
        passed = passed.max(find("barrier with every rank passed").unwrap_or(u128::MAX));
        if r != 2 {
            left = left.max(find("event Left { rank: 2").unwrap_or(u128::MAX));
        }
    }
    Ok((
        left.saturating_sub(killed) as f64 / 1000.0,
        passed.saturating_sub(killed) as f64 / 1000.0,
    ))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `cargo xtask bench bootstrap`.
pub(crate) fn command() -> Result<u8> {
    workspace::enter_root()?;
    deps::ensure(deps::ALL)?;
    let program = cargo_artifacts::build_program(RANK, true)?;
    let etcd = Etcd::start()?;
    let mut launch = String::from("| ranks |");
    let mut build = String::from("| ranks |");
    let mut rule = String::from("|---|");
    for e in Engine::ALL {
        launch += &format!(" {} |", e.name());
        build += &format!(" {} |", e.name());
        rule += "---|";
    }
    launch += &format!("\n{rule}\n");
    build += &format!("\n{rule}\n");
    for n in RANK_COUNTS {
        launch += &format!("| {n} |");
        build += &format!("| {n} |");
        for e in Engine::ALL {
            let mut l = Vec::new();
            let mut b = Vec::new();
            for run in 0..RUNS {
                let (x, y) = bootstrap_once(&program, e, n, &etcd, run)?;
                l.push(x);
                b.push(y);
            }
            say!(
                "xtask bench bootstrap: {n} ranks over {}: launch {l:?} ms, build {b:?} ms",
                e.name()
            );
            launch += &format!(" {:.0} |", median(l));
            build += &format!(" {:.0} |", median(b));
        }
        launch += "\n";
        build += "\n";
    }
    let mut replace = String::from(
        "| run | kill → Left at every survivor (ms) | kill → all four past a barrier (ms) |\n|---|---|---|\n",
    );
    for run in 0..RUNS {
        let (left, passed) = replace_once(&program, &etcd, run)?;
        replace += &format!("| {} | {left:.0} | {passed:.0} |\n", run + 1);
    }
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    say!(
        "\nBootstrap on this host ({cpus} CPUs), UCX, release build; medians of {RUNS} runs.\n\n\
         From starting the job to the last rank connected (ms):\n\n{launch}\n\
         The slowest rank's node build, the meeting included (ms):\n\n{build}\n\
         Replacing rank 2 of 4 through etcd (lease {TTL_MS} ms; goal: at most the lease + 2000 ms):\n\n{replace}"
    );
    Ok(0)
}
