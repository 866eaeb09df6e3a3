//! `cargo xtask vm [OPTIONS] -- CMD ARGS...` (options in [`crate::cli`]):
//! runs CMD inside a throwaway
//! qemu VM that has real soft-RoCE devices (`rxe0`, and `rxe1` on a second
//! rail), for hosts whose own kernel has no RDMA and cannot load modules.
//! See docs/soft-roce.md.

mod cache;
mod guest;
mod initramfs;
mod kernel;
mod qemu;
mod relay;
mod run_dir;
mod stage2;
mod supervise;
mod vmlinux;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::deps;
use crate::failure::{Failure, Result, STATUS_VM_FAILURE, io_failure};
use crate::signals;

pub(crate) use qemu::Accel;

/// What `cargo xtask vm` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct VmOptions {
    /// The whole run, boot retries included.
    pub(crate) timeout: Duration,
    /// A guest not in stage 2 by then is booted again.
    pub(crate) boot_timeout: Duration,
    /// Guest RAM, as qemu's `-m`.
    pub(crate) mem: String,
    /// `None`: 2, or 1 per guest with several guests (two vCPUs each are
    /// slower on every measure on a 2-core host).
    pub(crate) smp: Option<u32>,
    pub(crate) hosts: usize,
    pub(crate) accel: Accel,
    pub(crate) verbose: bool,
    pub(crate) command: Vec<OsString>,
}

impl VmOptions {
    /// Defaults for running `command`.
    pub(crate) fn new(command: Vec<OsString>) -> VmOptions {
        VmOptions {
            timeout: Duration::from_secs(1800),
            boot_timeout: Duration::from_secs(120),
            mem: "2G".into(),
            smp: None,
            hosts: 1,
            accel: Accel::Auto,
            verbose: false,
            command,
        }
    }
}

/// Runs `opts.command` in the VM(s) and returns its exit status. Failures of
/// the VM itself carry status 125, the overall timeout 124.
pub(crate) fn run(opts: &VmOptions) -> Result<u8> {
    deps::ensure(deps::VM)?;
    let cache_dir = cache::dir()?;
    cache::create_dir(&cache_dir)?;
    let kernel = kernel::prepare(&cache_dir).map_err(vm_failure)?;
    let cwd = std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .map_err(|e| io_failure("cannot determine the current directory", e))?;
    // The working directory is shared read-write so results land on the host;
    // sharing `/` read-write would defeat the overlay.
    let rw_share: Option<PathBuf> = (cwd != std::path::Path::new("/")).then(|| cwd.clone());
    let runs_dir = cache_dir.join("runs");
    cache::create_dir(&runs_dir)?;
    let dirs = (0..opts.hosts)
        .map(|i| run_dir::RunDir::create(&runs_dir, i))
        .collect::<Result<Vec<_>>>()?;
    let guests = guest::plan(opts.hosts, |i| dirs[i].path().to_path_buf());
    for (guest, dir) in guests.iter().zip(&dirs) {
        check_socket_path(guest)?;
        stage2::write_run_files(
            dir,
            &kernel,
            guest,
            &opts.command,
            &cwd,
            rw_share.as_deref(),
        )?;
    }
    let machine = qemu::Machine {
        accel: opts.accel,
        mem: opts.mem.clone(),
        smp: opts.smp.unwrap_or(if opts.hosts > 1 { 1 } else { 2 }),
        verbose: opts.verbose,
    };
    if opts.verbose {
        eprintln!(
            "xtask vm: kernel {} ({}), accel {:?}, read-write share: {}",
            kernel.release,
            kernel.image.display(),
            machine.accel.resolve(),
            rw_share
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "none".into())
        );
    }
    let runs: Vec<supervise::GuestRun<'_>> = guests
        .iter()
        .zip(&dirs)
        .map(|(guest, dir)| supervise::GuestRun { guest, dir })
        .collect();
    let qemu_for = |run: &supervise::GuestRun<'_>| {
        qemu::command(&machine, &kernel, run.guest, run.dir, rw_share.as_deref())
    };
    signals::catch_termination();
    let limits = supervise::Limits {
        timeout: opts.timeout,
        boot_timeout: opts.boot_timeout,
    };
    supervise::run(&runs, &qemu_for, limits)
}

/// `KVM` or `TCG`: what `--accel auto` picks on this host.
pub(crate) fn default_accel_name() -> &'static str {
    match qemu::Accel::Auto.resolve() {
        qemu::Accel::Kvm => "KVM",
        _ => "TCG",
    }
}

fn vm_failure(failure: Failure) -> Failure {
    Failure::with_status(failure.to_string(), STATUS_VM_FAILURE)
}

/// Unix socket paths are limited to 107 bytes.
fn check_socket_path(guest: &guest::Guest) -> Result<()> {
    for wire in guest.wires() {
        if wire.local_socket.as_os_str().len() > 100 {
            return Err(Failure::new(format!(
                "socket path too long for a unix socket: {} (set FERROVIA_VM_CACHE to a shorter directory)",
                wire.local_socket.display()
            )));
        }
    }
    Ok(())
}
