//! Child processes that never outlive xtask, and the threads that read
//! their output line by line.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::failure::Result;
use crate::out::Sink;
use crate::signals;

/// How often [`Watched::wait_for`] looks at the child.
const POLL: Duration = Duration::from_millis(20);

/// Makes the child of `command` die with xtask: PR_SET_PDEATHSIG=SIGKILL
/// covers a SIGKILL of xtask, which no guard can catch. Its own process
/// group keeps a terminal's Ctrl-C away from it: xtask catches the signal
/// and stops the child itself, in order.
pub(crate) fn die_with_xtask(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and only
    // calls async-signal-safe functions (prctl, getppid); it allocates
    // nothing (the error is a raw OS error).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // xtask may have died before prctl took effect.
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    command.process_group(0);
}

/// Runs the child of `command` on CPU `cpu` only (`sched_setaffinity`
/// before exec); a refusal leaves it unpinned.
pub(crate) fn pin_to_cpu(command: &mut Command, cpu: usize) {
    // SAFETY: the closure runs in the forked child before exec and only
    // calls sched_setaffinity, async-signal-safe, on a set on its stack.
    unsafe {
        command.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            Ok(())
        });
    }
}

/// What a line reader does with each line of a stream.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lines {
    /// Show it on this stream, after this prefix.
    pub(crate) echo: Option<(Sink, String)>,
    /// Keep it, to be returned when the stream ends.
    pub(crate) keep: bool,
}

impl Lines {
    /// Kept, not shown.
    pub(crate) fn kept() -> Lines {
        Lines {
            echo: None,
            keep: true,
        }
    }

    /// Shown on `sink` after `prefix`; kept too with `keep`.
    pub(crate) fn shown(sink: Sink, prefix: String, keep: bool) -> Lines {
        Lines {
            echo: Some((sink, prefix)),
            keep,
        }
    }
}

/// Reads `from` to its end, line by line (without the line end, invalid
/// UTF-8 replaced), as `how` says; returns the kept lines.
pub(crate) fn read_lines(from: impl Read, how: &Lines) -> Vec<String> {
    let mut reader = BufReader::new(from);
    let mut kept = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => return kept,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\n', '\r']);
                if let Some((sink, prefix)) = &how.echo {
                    sink.write(format!("{prefix}{text}\n").as_bytes());
                }
                if how.keep {
                    kept.push(text.to_string());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return kept,
        }
    }
}

/// Reads `from` to its end in chunks as they arrive (not lines: a test's
/// name shows while it runs), passing each to `each`.
pub(crate) fn read_chunks(mut from: impl Read, mut each: impl FnMut(&[u8])) {
    let mut buf = [0u8; 8192];
    loop {
        match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => each(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// [`read_lines`] in a thread of its own.
fn spawn_reader(from: impl Read + Send + 'static, how: Lines) -> JoinHandle<Vec<String>> {
    std::thread::spawn(move || read_lines(from, &how))
}

/// A started child that dies with xtask (see [`die_with_xtask`]) and is
/// killed and reaped when dropped; threads read its piped stdout and
/// stderr.
pub(crate) struct Watched {
    /// `None` once reaped.
    child: Option<Child>,
    status: Option<ExitStatus>,
    stdout: Option<JoinHandle<Vec<String>>>,
    stderr: Option<JoinHandle<Vec<String>>>,
}

/// How a [`Watched`] child ended.
#[derive(Debug)]
pub(crate) struct Finished {
    /// `None`: killed by xtask before it exited.
    pub(crate) status: Option<ExitStatus>,
    /// The kept lines of each stream.
    pub(crate) stdout: Vec<String>,
    pub(crate) stderr: Vec<String>,
}

impl Watched {
    /// Starts `command`; its stdout and stderr, where the command pipes
    /// them, are read as `stdout` and `stderr` say.
    pub(crate) fn spawn(
        command: &mut Command,
        stdout: Lines,
        stderr: Lines,
    ) -> std::io::Result<Watched> {
        die_with_xtask(command);
        let mut child = command.spawn()?;
        Ok(Watched {
            stdout: child.stdout.take().map(|s| spawn_reader(s, stdout)),
            stderr: child.stderr.take().map(|s| spawn_reader(s, stderr)),
            child: Some(child),
            status: None,
        })
    }

    /// The exit status, once it has exited.
    pub(crate) fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.as_mut()?.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits up to `limit` for the exit; `None` if it still runs. Fails if
    /// xtask is asked to stop meanwhile.
    pub(crate) fn wait_for(&mut self, limit: Duration) -> Result<Option<ExitStatus>> {
        let started = Instant::now();
        loop {
            signals::check()?;
            if let Some(status) = self.poll() {
                return Ok(Some(status));
            }
            if started.elapsed() >= limit {
                return Ok(None);
            }
            std::thread::sleep(POLL);
        }
    }

    /// Kills it if it still runs, and reaps it.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if self.status.is_none() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }

    /// Kills it if it still runs; how it ended and its kept output.
    pub(crate) fn finish(mut self) -> Finished {
        self.poll();
        self.kill();
        let join =
            |t: Option<JoinHandle<Vec<String>>>| t.and_then(|t| t.join().ok()).unwrap_or_default();
        Finished {
            status: self.status,
            stdout: join(self.stdout.take()),
            stderr: join(self.stderr.take()),
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    #[test]
    fn lines_are_kept_without_their_ends() {
        let kept = read_lines(&b"a\r\nb\n\xffc"[..], &Lines::kept());
        assert_eq!(kept, ["a", "b", "\u{fffd}c"]);
        assert!(read_lines(&b"x\n"[..], &Lines::default()).is_empty());
    }

    #[test]
    fn a_child_is_read_and_reaped() {
        let mut sh = Command::new("sh");
        sh.args(["-c", "echo out; echo err >&2; exit 3"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = Watched::spawn(&mut sh, Lines::kept(), Lines::kept()).unwrap();
        let status = child.wait_for(Duration::from_secs(20)).unwrap();
        assert_eq!(status.and_then(|s| s.code()), Some(3));
        let done = child.finish();
        assert_eq!(
            (done.stdout, done.stderr),
            (vec!["out".into()], vec!["err".into()])
        );
    }

    #[test]
    fn a_child_still_running_is_killed() {
        let mut sleep = Command::new("sleep");
        sleep.arg("60");
        let mut child = Watched::spawn(&mut sleep, Lines::kept(), Lines::kept()).unwrap();
        assert_eq!(child.wait_for(Duration::from_millis(50)).unwrap(), None);
        let started = Instant::now();
        assert!(child.finish().status.is_none());
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
