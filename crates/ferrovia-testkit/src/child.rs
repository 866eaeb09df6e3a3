//! What a test reads of a child process (exit, output, threads, open
//! files, memory), and a test that runs itself again in a child with an
//! environment of its own.

use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

/// Waits for a child up to `limit`; kills it past that. Returns (exit
/// code, stdout, stderr).
pub fn finish(mut child: Child, limit: Duration) -> (Option<i32>, String, String) {
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
pub struct Cost {
    /// Threads (`Threads:`).
    pub threads: usize,
    /// Open file descriptors.
    pub fds: usize,
    /// Resident set now, KiB.
    pub rss_kib: u64,
    /// Peak resident set so far (VmHWM), KiB.
    pub peak_kib: u64,
}

impl Cost {
    /// `None` once the process is gone.
    pub fn of(pid: u32) -> Option<Cost> {
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
    pub fn max(self, other: Cost) -> Cost {
        Cost {
            threads: self.threads.max(other.threads),
            fds: self.fds.max(other.fds),
            rss_kib: self.rss_kib.max(other.rss_kib),
            peak_kib: self.peak_kib.max(other.peak_kib),
        }
    }
}

/// Runs test `name` (whose body is `scenario`) again in a child process
/// with `key=value` set, or runs `scenario` when this already is that
/// child. For settings a library reads once per process (`UCX_TLS`) that
/// the tests of one binary would otherwise share.
pub fn in_child_with(name: &str, (key, value): (&str, &str), scenario: fn()) {
    if std::env::var(key).as_deref() == Ok(value) {
        return scenario();
    }
    let out = Command::new(std::env::current_exe().expect("the test executable"))
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(key, value)
        .output()
        .expect("run the test again in a child");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    print!("{stdout}");
    assert!(
        out.status.success(),
        "{name} with {key}={value} failed:\n{stdout}\n{stderr}"
    );
    // The child ran the scenario: not zero tests filtered in.
    assert!(stdout.contains("1 passed"), "{name} did not run:\n{stdout}");
}
