//! The per-guest, per-run control directory. It is shared with the guest
//! (9p tag `ferrovia_ctl`, mounted at /run/ferrovia-vm) and holds the stage-2
//! script, its config, the command, the environment, the stdout/stderr FIFOs,
//! the console log and the markers the guest leaves: `booted`, `up`,
//! `status`, `failed`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::failure::{Failure, Result, io_failure};

/// A control directory, removed when dropped.
pub(crate) struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// Creates `<runs>/run-<pid>-<index>`, first removing directories of
    /// runs whose xtask no longer exists (killed with SIGKILL, say).
    pub(crate) fn create(runs: &Path, index: usize) -> Result<RunDir> {
        remove_stale(runs);
        let path = runs.join(format!("run-{}-{index}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .map_err(|e| io_failure(format!("cannot create {}", path.display()), e))?;
        let dir = RunDir { path };
        mkfifo(&dir.stdout_fifo())?;
        mkfifo(&dir.stderr_fifo())?;
        Ok(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn stdout_fifo(&self) -> PathBuf {
        self.path.join("stdout.fifo")
    }

    pub(crate) fn stderr_fifo(&self) -> PathBuf {
        self.path.join("stderr.fifo")
    }

    pub(crate) fn console_log(&self) -> PathBuf {
        self.path.join("console.log")
    }

    /// Writes a file into the directory.
    pub(crate) fn write(&self, name: &str, data: &[u8]) -> Result<()> {
        let path = self.path.join(name);
        std::fs::write(&path, data)
            .map_err(|e| io_failure(format!("cannot write {}", path.display()), e))
    }

    /// Whether the guest has left the marker `name`.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.path.join(name).exists()
    }

    /// Removes the guest's markers before a (re)boot.
    pub(crate) fn clear_markers(&self) {
        for name in ["booted", "up", "status", "failed", "console.log"] {
            let _ = std::fs::remove_file(self.path.join(name));
        }
    }

    /// The guest command's exit status, once the guest has written it.
    pub(crate) fn status(&self) -> Option<u8> {
        std::fs::read_to_string(self.path.join("status"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Why the guest's own setup failed, if it did.
    pub(crate) fn setup_failure(&self) -> Option<String> {
        std::fs::read_to_string(self.path.join("failed"))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// The last `lines` lines of the guest console.
    pub(crate) fn console_tail(&self, lines: usize) -> String {
        let text = std::fs::read(self.console_log()).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let all: Vec<&str> = text.lines().collect();
        if all.is_empty() {
            // The kernel boots with `quiet`: nothing shows before stage 2.
            return "(console empty; --verbose shows the whole console live)".into();
        }
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn mkfifo(path: &Path) -> Result<()> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Failure::new(format!("path contains a NUL byte: {}", path.display())))?;
    // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io_failure(
            format!("cannot create FIFO {}", path.display()),
            std::io::Error::last_os_error(),
        ))
    }
}

/// Removes `run-<pid>-*` directories whose process is gone.
fn remove_stale(runs: &Path) {
    for entry in std::fs::read_dir(runs).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(run_dir_pid) else {
            continue;
        };
        if !process_exists(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// `run-1234-0` -> 1234.
fn run_dir_pid(name: &str) -> Option<libc::pid_t> {
    name.strip_prefix("run-")?
        .split('-')
        .next()?
        .parse()
        .ok()
        .filter(|pid| *pid > 0)
}

fn process_exists(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks whether the process exists; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_run_dir_names() {
        assert_eq!(run_dir_pid("run-1234-0"), Some(1234));
        assert_eq!(run_dir_pid("run-x-0"), None);
        assert_eq!(run_dir_pid("run-0-1"), None);
        assert_eq!(run_dir_pid("other"), None);
    }
}
