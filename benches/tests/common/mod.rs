//! Running the benchmark programs from tests: started with their output
//! piped, waited for under a limit.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long any one program may run.
pub const LIMIT: Duration = Duration::from_secs(90);

/// Starts `program` with `args` on verbs, its output piped.
pub fn start(program: &str, args: &[&str]) -> Child {
    start_with(program, args, &[("FERROVIA_BACKEND", "verbs")])
}

/// Starts `program` with `args` and `env`, its output piped.
pub fn start_with(program: &str, args: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {program} (perftest installed? cargo xtask deps): {e}")
        })
}

/// Waits until `child` prints a line containing `needle` on stdout (a
/// server saying it listens), at most [`LIMIT`]; a fixed sleep was too
/// short for a debug build in the emulated VM. From then on a thread
/// collects its stdout: joining the handle gives all of it, and
/// [`finish`] then returns only its stderr. `false` if the line never
/// came (the program exited or stayed silent).
pub fn wait_for_line(child: &mut Child, needle: &str) -> (bool, JoinHandle<String>) {
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let deadline = Instant::now() + LIMIT;
    let seen = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(needle) => break true,
            Ok(_) => {}
            Err(_) => break false,
        }
    };
    (seen, reader)
}

/// Waits up to [`LIMIT`]: whether it succeeded, and its output.
pub fn finish(mut child: Child, what: &str) -> (bool, String) {
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut out);
    }
    let verdict = match status {
        Some(s) => format!("{what} exited {s}"),
        None => format!("{what} ran over {LIMIT:?} and was killed"),
    };
    (
        status.is_some_and(|s| s.success()),
        format!("{verdict}:\n{out}"),
    )
}
