//! One job of `ferrovia-rank` processes on loopback, and what a test reads
//! of a rank process (exit, output, threads, open files, memory).

use std::cell::Cell;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

pub(crate) const RANK_BIN: &str = env!("CARGO_BIN_EXE_ferrovia-rank");

/// The environment that selects a backend.
pub(crate) type BackendEnv = &'static [(&'static str, &'static str)];

/// A job of `n` ranks on 127.0.0.1. Rank 0 listens on a port the OS picks
/// and reports it in a file (`FERROVIA_RENDEZVOUS_PORT_FILE`); the other
/// ranks are started with it. A port picked in advance could be taken
/// before rank 0 binds it.
pub(crate) struct Job {
    port: Cell<u16>,
    port_file: Option<PathBuf>,
    pub(crate) n: usize,
    pub(crate) token: String,
    pub(crate) backend: BackendEnv,
}

impl Job {
    pub(crate) fn new(n: usize, backend: BackendEnv) -> Job {
        static JOBS: AtomicUsize = AtomicUsize::new(0);
        let id = format!(
            "{}-{}",
            std::process::id(),
            JOBS.fetch_add(1, Ordering::Relaxed)
        );
        Job {
            port: Cell::new(0),
            port_file: Some(std::env::temp_dir().join(format!("ferrovia-test-{id}.port"))),
            n,
            token: format!("test-{id}"),
            backend,
        }
    }

    /// A job whose ranks all get `port` (for a rank 0 that never listens).
    pub(crate) fn at_port(n: usize, backend: BackendEnv, port: u16) -> Job {
        let job = Job::new(n, backend);
        job.port.set(port);
        Job {
            port_file: None,
            ..job
        }
    }

    /// Rank 0's port, once it reported it (see [`Job::wait_for_port`]).
    pub(crate) fn port(&self) -> u16 {
        self.port.get()
    }

    /// The command of rank `rank`, not started.
    pub(crate) fn command(&self, rank: usize, args: &[&str], extra: &[(&str, &str)]) -> Command {
        let mut c = Command::new(RANK_BIN);
        c.args(args)
            .env("FERROVIA_RANK", rank.to_string())
            .env("FERROVIA_WORLD_SIZE", self.n.to_string())
            .env("FERROVIA_JOB_TOKEN", &self.token)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match (&self.port_file, rank) {
            (Some(file), 0) => {
                let _ = std::fs::remove_file(file);
                c.env("FERROVIA_RENDEZVOUS", "127.0.0.1:0")
                    .env("FERROVIA_RENDEZVOUS_PORT_FILE", file);
            }
            _ => {
                assert_ne!(self.port(), 0, "rank {rank} started before rank 0");
                c.env("FERROVIA_RENDEZVOUS", format!("127.0.0.1:{}", self.port()));
            }
        }
        for (k, v) in self.backend.iter().chain(extra) {
            c.env(k, v);
        }
        c
    }

    /// Starts rank `rank`; rank 0 is waited for until it listens.
    pub(crate) fn spawn(&self, rank: usize, args: &[&str], extra: &[(&str, &str)]) -> Child {
        let child = self
            .command(rank, args, extra)
            .spawn()
            .expect("spawn ferrovia-rank");
        if rank == 0 {
            self.wait_for_port();
        }
        child
    }

    /// Waits until rank 0 reported its port (it listens from then on).
    pub(crate) fn wait_for_port(&self) -> u16 {
        let Some(file) = &self.port_file else {
            return self.port();
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let reported = std::fs::read_to_string(file).ok();
            if let Some(port) = reported.and_then(|p| p.trim().parse().ok()) {
                let _ = std::fs::remove_file(file);
                self.port.set(port);
                return port;
            }
            assert!(Instant::now() < deadline, "rank 0 never reported its port");
            thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Waits for a child up to `limit`; kills it past that. Returns (exit
/// code, stdout, stderr).
pub(crate) fn finish(mut child: Child, limit: Duration) -> (Option<i32>, String, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    (
        status.and_then(|s| s.code()),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What a process costs: from /proc/PID/status and /proc/PID/fd.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cost {
    pub(crate) threads: usize,
    pub(crate) fds: usize,
    /// Resident set now, KiB.
    pub(crate) rss_kib: u64,
    /// Peak resident set so far (VmHWM), KiB.
    pub(crate) peak_kib: u64,
}

impl Cost {
    /// `None` once the process is gone.
    pub(crate) fn of(pid: u32) -> Option<Cost> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
        Some(Cost {
            threads: field("Threads:") as usize,
            fds,
            rss_kib: field("VmRSS:"),
            peak_kib: field("VmHWM:"),
        })
    }

    /// The larger of each.
    pub(crate) fn max(self, other: Cost) -> Cost {
        Cost {
            threads: self.threads.max(other.threads),
            fds: self.fds.max(other.fds),
            rss_kib: self.rss_kib.max(other.rss_kib),
            peak_kib: self.peak_kib.max(other.peak_kib),
        }
    }
}
