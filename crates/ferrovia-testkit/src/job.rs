//! `Job`: one job of rank processes (`ferrovia-rank`, `ferrovia-async-rank`)
//! on loopback, meeting through rank 0's rendezvous.

use std::cell::Cell;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// The environment that selects a backend.
pub type BackendEnv = &'static [(&'static str, &'static str)];

/// A job of `n` ranks on 127.0.0.1. Rank 0 listens on a port the OS picks
/// and reports it in a file (`FERROVIA_RENDEZVOUS_PORT_FILE`); the other
/// ranks are started with it. A port picked in advance could be taken
/// before rank 0 binds it.
pub struct Job {
    program: PathBuf,
    port: Cell<u16>,
    port_file: Option<PathBuf>,
    /// How many ranks.
    pub n: usize,
    /// The job token every rank gets.
    pub token: String,
    /// The environment that selects the backend.
    pub backend: BackendEnv,
}

impl Job {
    /// A job of `n` ranks of `program` over `backend`.
    pub fn new(program: impl Into<PathBuf>, n: usize, backend: BackendEnv) -> Job {
        static JOBS: AtomicUsize = AtomicUsize::new(0);
        let id = format!(
            "{}-{}",
            std::process::id(),
            JOBS.fetch_add(1, Ordering::Relaxed)
        );
        Job {
            program: program.into(),
            port: Cell::new(0),
            port_file: Some(std::env::temp_dir().join(format!("ferrovia-test-{id}.port"))),
            n,
            token: format!("test-{id}"),
            backend,
        }
    }

    /// A job whose ranks all get `port` (for a rank 0 that never listens).
    pub fn at_port(program: impl Into<PathBuf>, n: usize, backend: BackendEnv, port: u16) -> Job {
        let job = Job::new(program, n, backend);
        job.port.set(port);
        Job {
            port_file: None,
            ..job
        }
    }

    /// Rank 0's port, once it reported it (see [`Job::wait_for_port`]).
    pub fn port(&self) -> u16 {
        self.port.get()
    }

    /// The command of rank `rank`, not started.
    pub fn command(&self, rank: usize, args: &[&str], extra: &[(&str, &str)]) -> Command {
        let mut c = Command::new(&self.program);
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
    pub fn spawn(&self, rank: usize, args: &[&str], extra: &[(&str, &str)]) -> Child {
        let child = self
            .command(rank, args, extra)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.program.display()));
        if rank == 0 {
            self.wait_for_port();
        }
        child
    }

    /// Waits until rank 0 reported its port (it listens from then on).
    pub fn wait_for_port(&self) -> u16 {
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
