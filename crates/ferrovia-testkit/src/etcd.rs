//! A private etcd for a test: Debian's `etcd-server` on loopback, with a
//! data directory of its own, stopped (and its directory removed) when
//! dropped; killed and restarted on the same ports and data for the
//! store-lost tests.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// One etcd server on 127.0.0.1.
pub struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    /// Its client port.
    pub port: u16,
    peer_port: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Etcd {
    /// Starts a fresh etcd and waits until it answers (at most 30 s).
    pub fn start() -> Etcd {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ferrovia-etcd-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("etcd's data directory");
        let mut etcd = Etcd {
            child: None,
            dir,
            port: free_port(),
            peer_port: free_port(),
        };
        etcd.restart();
        etcd
    }

    /// `etcd://127.0.0.1:PORT/JOB`, for `FERROVIA_STORE`.
    pub fn url(&self, job: &str) -> String {
        format!("etcd://127.0.0.1:{}/{job}", self.port)
    }

    /// Kills the server (SIGKILL): the store is lost.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server (again) on its ports and data, and waits until
    /// it answers.
    pub fn restart(&mut self) {
        self.kill();
        let client = format!("http://127.0.0.1:{}", self.port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.dir.join("etcd.log")).expect("etcd's log");
        let child = Command::new("etcd")
            .arg("--name=ferrovia-test")
            .arg(format!("--data-dir={}", self.dir.join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=ferrovia-test={peer}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd (apt-get install etcd-server, or cargo xtask deps)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let healthy = Command::new("etcdctl")
                .arg(format!("--endpoints={client}"))
                .args(["--command-timeout=1s", "endpoint", "health"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if healthy {
                return;
            }
            let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
            assert!(Instant::now() < deadline, "etcd did not come up:\n{log}");
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
