//! The ranks of one ferrovia job on one machine: N processes of a program
//! with `FERROVIA_RANK=0..N-1`, `FERROVIA_WORLD_SIZE=N`, a rendezvous on
//! 127.0.0.1 at a free port and a job token of their own, their output
//! shown line by line as `[rank R] ...`. Used by `cargo xtask demo` and
//! `cargo xtask bench barrier`, on the host or inside the VM (there as the
//! hidden `xtask ranks`, or by a hidden subcommand that calls [`run`]).
//!
//! No rank outlives the job: the ranks die with xtask (PR_SET_PDEATHSIG),
//! a guard kills and reaps them on every exit path (a caller that ran
//! [`signals::catch_termination`] also on Ctrl-C), a failed rank's peers
//! get a grace period to finish before they are stopped, and a job that
//! overruns its timeout is stopped whole.

use std::ffi::OsString;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::failure::{Failure, Result};
use crate::out::Sink;
use crate::process::{Lines, Watched};
use crate::signals;

/// How often the ranks are checked.
const POLL: Duration = Duration::from_millis(20);
/// How long the others may go on after one rank failed, by default: they
/// may report something useful, or wait for the failed peer until their own
/// timeout.
const PEER_GRACE: Duration = Duration::from_secs(10);
/// The default timeout of a whole job.
const TIMEOUT: Duration = Duration::from_secs(600);
/// Variables that would make the ranks ignore the ones xtask sets
/// (`FERROVIA_RANK` with a host file means "read the host file").
const CLEARED_VARS: &[&str] = &["FERROVIA_HOSTFILE"];

/// One job: `ranks` copies of `program args...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Job {
    pub(crate) program: PathBuf,
    pub(crate) ranks: usize,
    pub(crate) args: Vec<OsString>,
    /// Added to every rank's environment.
    pub(crate) env: Vec<(String, String)>,
    /// For the whole job; then every rank still running is killed.
    pub(crate) timeout: Duration,
    /// How long the others may go on once one rank has failed.
    pub(crate) peer_grace: Duration,
}

impl Job {
    /// `ranks` copies of `program args...`, default timeouts, no extra
    /// environment.
    pub(crate) fn new(program: PathBuf, ranks: usize, args: Vec<OsString>) -> Job {
        Job {
            program,
            ranks,
            args,
            env: Vec::new(),
            timeout: TIMEOUT,
            peer_grace: PEER_GRACE,
        }
    }
}

/// How each rank of a job ended.
#[derive(Debug)]
pub(crate) struct Finished {
    /// Per rank; `None`: stopped by xtask (timeout, or after a peer failed).
    pub(crate) statuses: Vec<Option<ExitStatus>>,
    /// Per rank, the lines it wrote to stdout (they were shown as well).
    pub(crate) stdout: Vec<Vec<String>>,
    /// The rank that failed first, if any did.
    first_failed: Option<usize>,
    timed_out: Option<Duration>,
    peer_grace: Duration,
}

impl Finished {
    /// `Ok` when every rank exited 0; else what went wrong, with the exit
    /// status of the rank that failed first (1 if it had none).
    pub(crate) fn verdict(&self) -> Result<()> {
        let stopped: Vec<String> = (0..self.statuses.len())
            .filter(|&r| self.statuses[r].is_none())
            .map(|r| r.to_string())
            .collect();
        if let Some(timeout) = self.timed_out {
            return Err(Failure::new(format!(
                "the ranks did not finish within {} s; stopped rank(s) {}",
                timeout.as_secs(),
                stopped.join(", ")
            )));
        }
        let Some(first) = self.first_failed else {
            return Ok(());
        };
        let status = self.statuses[first];
        let mut message = format!(
            "rank {first} of {} failed ({})",
            self.statuses.len(),
            status.map_or_else(|| "stopped".into(), |s| s.to_string())
        );
        if !stopped.is_empty() {
            message.push_str(&format!(
                "; rank(s) {} stopped {} s later",
                stopped.join(", "),
                self.peer_grace.as_secs()
            ));
        }
        let code = status
            .and_then(|s| s.code())
            .and_then(|c| u8::try_from(c).ok())
            .filter(|&c| c != 0)
            .unwrap_or(1);
        Err(Failure::with_status(message, code))
    }
}

/// Runs `job` to its end. `Err` only when it could not be started or xtask
/// was interrupted; a failed rank shows in [`Finished::verdict`].
pub(crate) fn run(job: &Job) -> Result<Finished> {
    if job.ranks == 0 {
        return Err(Failure::new("a job needs at least one rank"));
    }
    let port = free_port()?;
    let token = format!(
        "xtask-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let mut ranks = Vec::with_capacity(job.ranks);
    for rank in 0..job.ranks {
        let prefix = format!("[rank {rank}] ");
        let started = Watched::spawn(
            &mut rank_command(job, rank, port, &token),
            Lines::shown(Sink::Stdout, prefix.clone(), true),
            Lines::shown(Sink::Stderr, prefix, false),
        )
        .map_err(|e| Failure::new(format!("cannot start {}: {e}", job.program.display())))?;
        ranks.push(started);
    }
    let started = Instant::now();
    let mut first_failed: Option<(usize, Instant)> = None;
    let mut timed_out = None;
    loop {
        // Returning drops `ranks`, which kills them.
        signals::check()?;
        for (r, rank) in ranks.iter_mut().enumerate() {
            if let Some(status) = rank.poll()
                && !status.success()
                && first_failed.is_none()
            {
                first_failed = Some((r, Instant::now()));
            }
        }
        if ranks.iter_mut().all(|r| r.poll().is_some()) {
            break;
        }
        let overran = started.elapsed() >= job.timeout;
        if overran {
            timed_out = Some(job.timeout);
        }
        if overran || first_failed.is_some_and(|(_, at)| at.elapsed() >= job.peer_grace) {
            ranks.iter_mut().for_each(Watched::kill);
            break;
        }
        std::thread::sleep(POLL);
    }
    let (statuses, stdout) = ranks
        .into_iter()
        .map(|rank| {
            let done = rank.finish();
            (done.status, done.stdout)
        })
        .unzip();
    Ok(Finished {
        statuses,
        stdout,
        first_failed: first_failed.map(|(r, _)| r),
        timed_out,
        peer_grace: job.peer_grace,
    })
}

/// The command of rank `rank` of `job`.
fn rank_command(job: &Job, rank: usize, port: u16, token: &str) -> Command {
    let mut command = Command::new(&job.program);
    command
        .args(&job.args)
        .env("FERROVIA_RANK", rank.to_string())
        .env("FERROVIA_WORLD_SIZE", job.ranks.to_string())
        .env("FERROVIA_RENDEZVOUS", format!("127.0.0.1:{port}"))
        .env("FERROVIA_JOB_TOKEN", token)
        .envs(job.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in CLEARED_VARS {
        command.env_remove(var);
    }
    command
}

/// A TCP port nobody listens on right now (rank 0 binds it moments later).
fn free_port() -> Result<u16> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Failure::new(format!("cannot find a free TCP port: {e}")))
}

/// `xtask ranks [--timeout SECS] N PROGRAM [ARGS...]` (hidden): runs one job
/// and exits with the status of the rank that failed first. `cargo xtask
/// demo` runs it inside the VM.
pub(crate) fn command(job: &Job) -> Result<u8> {
    signals::catch_termination();
    run(job)?.verdict().map(|()| 0)
}

/// The arguments of `xtask ranks` for `job` (its `env` is not passed: the
/// caller's environment is).
pub(crate) fn to_args(job: &Job) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "--timeout".into(),
        job.timeout.as_secs().max(1).to_string().into(),
        job.ranks.to_string().into(),
        job.program.clone().into(),
    ];
    args.extend(job.args.iter().cloned());
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(program: &str, ranks: usize, args: &[&str]) -> Job {
        let mut job = Job::new(
            program.into(),
            ranks,
            args.iter().map(OsString::from).collect(),
        );
        job.timeout = Duration::from_secs(20);
        job.peer_grace = Duration::from_millis(300);
        job
    }

    #[test]
    fn each_rank_gets_its_own_variables() {
        let mut j = job("p", 3, &["exchange"]);
        j.env
            .push(("FERROVIA_BOOTSTRAP_TIMEOUT_MS".into(), "9".into()));
        let command = rank_command(&j, 2, 4242, "tok");
        let envs: Vec<(String, Option<String>)> = command
            .get_envs()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect();
        for (k, v) in [
            ("FERROVIA_RANK", "2"),
            ("FERROVIA_WORLD_SIZE", "3"),
            ("FERROVIA_RENDEZVOUS", "127.0.0.1:4242"),
            ("FERROVIA_JOB_TOKEN", "tok"),
            ("FERROVIA_BOOTSTRAP_TIMEOUT_MS", "9"),
        ] {
            assert!(envs.contains(&(k.into(), Some(v.into()))), "{k}: {envs:?}");
        }
        assert!(envs.contains(&("FERROVIA_HOSTFILE".into(), None)));
    }

    #[test]
    fn all_ranks_succeed_and_output_is_kept() {
        let mut j = job(
            "/bin/sh",
            3,
            &["-c", "echo \"r=$FERROVIA_RANK n=$FERROVIA_WORLD_SIZE\""],
        );
        j.timeout = Duration::from_secs(30);
        let done = run(&j).unwrap();
        assert!(done.verdict().is_ok());
        assert_eq!(done.stdout[2], ["r=2 n=3"]);
    }

    #[test]
    fn a_failed_rank_fails_the_job_and_stops_its_peers() {
        let j = job(
            "/bin/sh",
            2,
            &[
                "-c",
                "if [ $FERROVIA_RANK = 1 ]; then exit 3; fi; exec sleep 60",
            ],
        );
        let started = Instant::now();
        let done = run(&j).unwrap();
        let failure = done.verdict().unwrap_err();
        assert_eq!(failure.status(), 3);
        assert!(
            failure.to_string().starts_with("rank 1 of 2 failed"),
            "{failure}"
        );
        assert!(done.statuses[0].is_none());
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn a_job_past_its_timeout_is_stopped() {
        let mut j = job("/bin/sh", 2, &["-c", "exec sleep 60"]);
        j.timeout = Duration::from_secs(1);
        let done = run(&j).unwrap();
        let failure = done.verdict().unwrap_err();
        assert!(failure.to_string().contains("within 1 s"), "{failure}");
        assert!(done.statuses.iter().all(Option::is_none));
    }
}
