//! Running the guests: start qemu, watch for the boot markers, retry a
//! stalled boot, enforce the overall timeout, react to Ctrl-C/SIGTERM, and
//! turn what the guests left behind into one exit status.

use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::failure::{Failure, Result, STATUS_TIMEOUT, STATUS_VM_FAILURE};
use crate::out::Sink;
use crate::process::{Lines, Watched};
use crate::signals;
use crate::vm::guest::Guest;
use crate::vm::relay::Relay;
use crate::vm::run_dir::RunDir;

/// Boots tried before giving up (a TCG boot stalls very rarely).
const BOOT_ATTEMPTS: u32 = 3;
/// How often the markers and qemu are checked.
const POLL: Duration = Duration::from_millis(50);
/// With several guests: how long the others may go on after one failed
/// (they may be waiting for a peer that is gone).
const PEER_GRACE: Duration = Duration::from_secs(30);

/// Time limits of a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// For everything, all boot attempts included.
    pub(crate) timeout: Duration,
    /// From qemu start until stage 2 must have started.
    pub(crate) boot_timeout: Duration,
}

/// One guest with its control directory.
pub(crate) struct GuestRun<'a> {
    pub(crate) guest: &'a Guest,
    pub(crate) dir: &'a RunDir,
}

/// A started guest. Field order matters: qemu is killed before the relays
/// are waited for. qemu dies with xtask in any case (see [`Watched`]).
struct Started {
    qemu: Watched,
    _stdout: Relay,
    _stderr: Relay,
    exit: Option<ExitStatus>,
    up_reported: bool,
}

enum AttemptEnd {
    /// Every qemu exited after booting.
    Finished(Vec<Option<ExitStatus>>),
    /// A guest did not boot: try again.
    Stalled,
}

/// Boots the guests (retrying stalled boots) and returns the exit status of
/// their command: the first non-zero one, in guest order.
pub(crate) fn run(
    runs: &[GuestRun<'_>],
    qemu_for: &dyn Fn(&GuestRun<'_>) -> Command,
    limits: Limits,
) -> Result<u8> {
    let deadline = Instant::now() + limits.timeout;
    for attempt in 1..=BOOT_ATTEMPTS {
        match attempt_boot(runs, qemu_for, limits, deadline, attempt)? {
            AttemptEnd::Finished(exits) => return evaluate(runs, &exits),
            AttemptEnd::Stalled => continue,
        }
    }
    let tails: Vec<String> = runs.iter().map(|r| r.dir.console_tail(30)).collect();
    Err(Failure::with_status(
        format!(
            "the guest did not boot in {BOOT_ATTEMPTS} attempts; console:\n{}",
            tails.join("\n---\n")
        ),
        STATUS_VM_FAILURE,
    ))
}

fn attempt_boot(
    runs: &[GuestRun<'_>],
    qemu_for: &dyn Fn(&GuestRun<'_>) -> Command,
    limits: Limits,
    deadline: Instant,
    attempt: u32,
) -> Result<AttemptEnd> {
    let several = runs.len() > 1;
    let mut started = Vec::with_capacity(runs.len());
    for run in runs {
        run.dir.clear_markers();
        for wire in run.guest.wires() {
            let _ = std::fs::remove_file(&wire.local_socket);
        }
        let prefix = several.then(|| format!("[host {}] ", run.guest.index));
        let relay = |fifo: std::path::PathBuf, sink: Sink| {
            Relay::start(&fifo, sink, prefix.clone())
                .map_err(|e| Failure::new(format!("cannot start a relay thread: {e}")))
        };
        started.push(Started {
            _stdout: relay(run.dir.stdout_fifo(), Sink::Stdout)?,
            _stderr: relay(run.dir.stderr_fifo(), Sink::Stderr)?,
            qemu: Watched::spawn(&mut qemu_for(run), Lines::default(), Lines::default())
                .map_err(|e| Failure::new(format!("cannot start qemu-system-x86_64: {e}")))?,
            exit: None,
            up_reported: false,
        });
    }
    let boot_start = Instant::now();
    let mut first_failure: Option<Instant> = None;
    loop {
        signals::check()?;
        if Instant::now() >= deadline {
            return Err(Failure::with_status(
                format!("timed out after {} s (--timeout)", limits.timeout.as_secs()),
                STATUS_TIMEOUT,
            ));
        }
        for (run, s) in runs.iter().zip(started.iter_mut()) {
            if !s.up_reported && run.dir.has("up") {
                s.up_reported = true;
                let host = if several {
                    format!("host {}: ", run.guest.index)
                } else {
                    String::new()
                };
                let devices: Vec<&str> = run.guest.rails.iter().map(|r| r.rxe).collect();
                eprintln!(
                    "xtask vm: {host}{} up after {:.1} s",
                    devices.join(", "),
                    boot_start.elapsed().as_secs_f64()
                );
            }
            if s.exit.is_none() {
                s.exit = s.qemu.poll();
                if s.exit.is_some() && run.dir.status().is_some_and(|st| st != 0) {
                    first_failure.get_or_insert_with(Instant::now);
                }
            }
        }
        if started.iter().all(|s| s.exit.is_some()) {
            break;
        }
        if !runs.iter().all(|r| r.dir.has("booted")) && boot_start.elapsed() >= limits.boot_timeout
        {
            eprintln!(
                "xtask vm: guest did not boot within {} s (attempt {attempt} of {BOOT_ATTEMPTS})",
                limits.boot_timeout.as_secs()
            );
            return Ok(AttemptEnd::Stalled);
        }
        if first_failure.is_some_and(|t| t.elapsed() >= PEER_GRACE) {
            eprintln!(
                "xtask vm: a guest failed {} s ago; stopping the others",
                PEER_GRACE.as_secs()
            );
            for s in &mut started {
                s.qemu.kill();
                s.exit = s.exit.or_else(|| s.qemu.poll());
            }
            break;
        }
        std::thread::sleep(POLL);
    }
    let exits: Vec<Option<ExitStatus>> = started.iter().map(|s| s.exit).collect();
    drop(started);
    for (run, exit) in runs.iter().zip(&exits) {
        if !run.dir.has("booted") && run.dir.status().is_none() {
            let how = exit
                .map(|e| e.to_string())
                .unwrap_or_else(|| "killed".into());
            eprintln!(
                "xtask vm: VM exited ({how}) before booting (attempt {attempt} of {BOOT_ATTEMPTS})"
            );
            return Ok(AttemptEnd::Stalled);
        }
    }
    Ok(AttemptEnd::Finished(exits))
}

/// The exit status of the run, from the markers the guests left.
fn evaluate(runs: &[GuestRun<'_>], exits: &[Option<ExitStatus>]) -> Result<u8> {
    let name = |run: &GuestRun<'_>| {
        if runs.len() > 1 {
            format!("host {}", run.guest.index)
        } else {
            "the guest".into()
        }
    };
    for run in runs {
        if let Some(why) = run.dir.setup_failure() {
            return Err(Failure::with_status(
                format!(
                    "{} failed to set up: {why}; console:\n{}",
                    name(run),
                    run.dir.console_tail(30)
                ),
                STATUS_VM_FAILURE,
            ));
        }
    }
    if let Some(status) = runs.iter().filter_map(|r| r.dir.status()).find(|s| *s != 0) {
        return Ok(status);
    }
    for (run, exit) in runs.iter().zip(exits) {
        if run.dir.status().is_none() {
            let how = exit
                .map(|e| e.to_string())
                .unwrap_or_else(|| "killed".into());
            return Err(Failure::with_status(
                format!(
                    "the VM of {} ended ({how}) without an exit status from the guest; console:\n{}",
                    name(run),
                    run.dir.console_tail(40)
                ),
                STATUS_VM_FAILURE,
            ));
        }
    }
    Ok(0)
}
