//! One measurement: a benchmark's server, then its client on the same
//! machine, each watched with a deadline. The client starts only once the
//! server listens on its TCP port(s) (read from `/proc/net/tcp*`): a
//! perftest client that misses its server would wait forever, and one
//! started too early fails. Nothing outlives a run: both processes die
//! with xtask (`PR_SET_PDEATHSIG`) and are killed and reaped on every path.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::plan::Invocation;
use crate::failure::{Failure, Result};
use crate::process::{Finished, Lines, Watched};
use crate::signals;

/// How often the processes and the sockets are looked at.
const POLL: Duration = Duration::from_millis(20);

/// How long each stage of a run may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// From the server's start until it listens.
    pub(crate) listen: Duration,
    /// From the client's start until it exits.
    pub(crate) client: Duration,
    /// For the server to exit after the client did.
    pub(crate) server_exit: Duration,
}

/// What a successful run leaves: the client's stdout and how long it ran.
#[derive(Debug)]
pub(crate) struct Ran {
    pub(crate) client_stdout: Vec<String>,
    pub(crate) secs: f64,
}

/// Runs `inv` to its end. The inner `Err` says why the run gave nothing
/// (it becomes a note under the table); the outer one only comes from an
/// interrupted xtask.
pub(crate) fn run(inv: &Invocation, limits: Limits) -> Result<std::result::Result<Ran, String>> {
    // Its file name only: the reasons go into docs/benchmarks.md, which
    // names no path of this machine.
    let program = std::path::Path::new(&inv.program)
        .file_name()
        .unwrap_or(inv.program.as_os_str())
        .to_string_lossy();
    let mut server = match spawn(inv, &inv.server, 0) {
        Ok(p) => p,
        Err(e) => return Ok(Err(format!("cannot start {program}: {e}"))),
    };
    let started = Instant::now();
    loop {
        signals::check()?;
        let listening = listening_ports();
        if inv.listen.iter().all(|p| listening.contains(p)) {
            break;
        }
        if let Some(status) = server.poll() {
            return Ok(Err(format!(
                "the {program} server exited before it listened ({status}){}",
                last_words(&server.finish())
            )));
        }
        if started.elapsed() >= limits.listen {
            return Ok(Err(format!(
                "the {program} server did not listen within {} s{}",
                limits.listen.as_secs(),
                last_words(&server.finish())
            )));
        }
        std::thread::sleep(POLL);
    }
    let mut client = match spawn(inv, &inv.client, 1) {
        Ok(p) => p,
        Err(e) => return Ok(Err(format!("cannot start the {program} client: {e}"))),
    };
    let started = Instant::now();
    let client_status = client.wait_for(limits.client)?;
    let secs = started.elapsed().as_secs_f64();
    let server_status = server.wait_for(limits.server_exit)?;
    let client = client.finish();
    let server = server.finish();
    let server_note = match server_status {
        None => " (server killed)".to_string(),
        Some(s) if !s.success() => format!(" (server {s}{})", last_words(&server)),
        Some(_) => String::new(),
    };
    match client_status {
        None => Ok(Err(format!(
            "the {program} client timed out after {} s{server_note}",
            limits.client.as_secs()
        ))),
        Some(status) if !status.success() => Ok(Err(format!(
            "the {program} client failed ({status}){}{server_note}",
            last_words(&client)
        ))),
        Some(_) => Ok(Ok(Ran {
            client_stdout: client.stdout,
            secs,
        })),
    }
}

/// `: LINE` with the last non-empty line of a program's stderr, else of
/// its stdout, to say why it failed.
fn last_words(done: &Finished) -> String {
    done.stderr
        .iter()
        .chain(&done.stdout)
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| {
            let l = l.trim();
            let cut: String = l.chars().take(160).collect();
            format!(": {cut}")
        })
        .unwrap_or_default()
}

/// Starts `inv.program args`, its output kept.
fn spawn(inv: &Invocation, args: &[OsString], cpu: usize) -> std::io::Result<Watched> {
    let mut command = Command::new(&inv.program);
    command
        .args(args)
        .envs(inv.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if inv.pin && std::thread::available_parallelism().is_ok_and(|n| n.get() > cpu) {
        crate::process::pin_to_cpu(&mut command, cpu);
    }
    Watched::spawn(&mut command, Lines::kept(), Lines::kept())
}

/// The local TCP ports in state LISTEN (IPv4 and IPv6).
fn listening_ports() -> BTreeSet<u16> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|text| parse_listening(&text))
        .collect()
}

/// The LISTEN ports of one `/proc/net/tcp` table: `local_address` is
/// `ADDR:PORT` in hex, `st` 0A is LISTEN.
fn parse_listening(table: &str) -> Vec<u16> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (_, port) = fields.get(1)?.rsplit_once(':')?;
            (fields.get(3)? == &"0A").then_some(())?;
            u16::from_str_radix(port, 16).ok()
        })
        .collect()
}

/// Hands out distinct TCP ports, one block per run, skipping ports
/// something else holds.
#[derive(Debug)]
pub(crate) struct Ports {
    next: u16,
}

impl Ports {
    /// Ports from `first` on.
    pub(crate) fn new(first: u16) -> Ports {
        Ports { next: first }
    }

    /// The first of `count` consecutive ports that are free right now.
    pub(crate) fn take(&mut self, count: usize) -> Result<u16> {
        let count = u16::try_from(count.max(1)).unwrap_or(u16::MAX);
        for _ in 0..1000 {
            let first = self.next;
            let Some(end) = first.checked_add(count) else {
                break;
            };
            self.next = end;
            if (first..end).all(|p| TcpListener::bind(("0.0.0.0", p)).is_ok()) {
                return Ok(first);
            }
        }
        Err(Failure::new(
            "no free block of TCP ports left for the benchmarks",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, listen: Vec<u16>) -> Invocation {
        Invocation {
            program: "/bin/sh".into(),
            server: vec!["-c".into(), script.into(), "server".into()],
            client: vec!["-c".into(), script.into(), "client".into()],
            env: vec![("BENCH_TEST_VAR".into(), "42".into())],
            listen,
            pin: false,
        }
    }

    fn limits() -> Limits {
        Limits {
            listen: Duration::from_secs(5),
            client: Duration::from_secs(5),
            server_exit: Duration::from_secs(1),
        }
    }

    #[test]
    fn listening_ports_are_read_from_proc_net_tcp() {
        let table = "\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:4E21 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
   1: 0100007F:9C40 0100007F:4E21 01 00000000:00000000 00:00000000 00000000     0        0 2 1
   2: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 0 0";
        assert_eq!(parse_listening(table), [20001, 8080]);
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listening_ports().contains(&port));
    }

    #[test]
    fn ports_are_distinct_and_free() {
        let mut ports = Ports::new(42000);
        let a = ports.take(4).unwrap();
        let b = ports.take(1).unwrap();
        assert!(b >= a + 4);
        let held = TcpListener::bind(("0.0.0.0", 0)).unwrap();
        let held_port = held.local_addr().unwrap().port();
        let mut ports = Ports::new(held_port);
        assert_ne!(ports.take(1).unwrap(), held_port);
    }

    #[test]
    fn a_pair_runs_once_the_server_listens() {
        let port = Ports::new(42100).take(1).unwrap();
        // The "server" listens briefly (via a held socket of this test, so
        // no tool is needed); the client prints.
        let listener = TcpListener::bind(("0.0.0.0", port)).unwrap();
        let inv = sh(
            "if [ $0 = client ]; then echo \"v=$BENCH_TEST_VAR\"; fi",
            vec![port],
        );
        let ran = run(&inv, limits()).unwrap().unwrap();
        assert_eq!(ran.client_stdout, ["v=42"]);
        drop(listener);
    }

    #[test]
    fn failures_become_reasons() {
        let never = Ports::new(42200).take(1).unwrap();
        let inv = sh("echo no device >&2; exit 3", vec![never]);
        let reason = run(&inv, limits()).unwrap().unwrap_err();
        assert!(reason.contains("exited before it listened"), "{reason}");
        assert!(reason.ends_with(": no device"), "{reason}");

        let mut quick = limits();
        quick.listen = Duration::from_millis(200);
        let reason = run(&sh("exec sleep 30", vec![never]), quick)
            .unwrap()
            .unwrap_err();
        assert!(reason.contains("did not listen within 0 s"), "{reason}");

        let listener = TcpListener::bind(("0.0.0.0", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut short = limits();
        short.client = Duration::from_millis(300);
        let started = Instant::now();
        let reason = run(&sh("exec sleep 30", vec![port]), short)
            .unwrap()
            .unwrap_err();
        assert!(reason.contains("client timed out"), "{reason}");
        assert!(reason.contains("server killed"), "{reason}");
        assert!(started.elapsed() < Duration::from_secs(10));

        let inv = sh(
            "if [ $0 = client ]; then echo bad >&2; exit 1; fi",
            vec![port],
        );
        let reason = run(&inv, limits()).unwrap().unwrap_err();
        assert!(reason.contains("client failed"), "{reason}");
        assert!(reason.contains(": bad"), "{reason}");

        let missing = Invocation {
            program: "/nonexistent/tool".into(),
            ..sh("", vec![port])
        };
        let reason = run(&missing, limits()).unwrap().unwrap_err();
        // The file name only: reasons go into docs/benchmarks.md.
        assert!(reason.starts_with("cannot start tool:"), "{reason}");
    }
}
