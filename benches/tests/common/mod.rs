//! Running the benchmark programs from tests: started with their output
//! piped, waited for under a limit.
#![allow(dead_code, unreachable_pub)]

use std::io::Read;
use std::process::{Child, Command, Stdio};
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
