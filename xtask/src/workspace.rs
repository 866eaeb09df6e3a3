//! The workspace root, so that `cargo xtask test`/`demo` behave the same
//! from any directory, and the scratch files xtask keeps under it.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::failure::{Result, io_failure};

/// The workspace's packages that are no library for users: never
/// published (`publish = false`), and left out of the package step.
pub(crate) const UNPUBLISHED: [&str; 3] = ["xtask", "ferrovia-benches", "ferrovia-testkit"];

/// The directory holding the workspace Cargo.toml (xtask's parent).
pub(crate) fn root() -> PathBuf {
    let xtask_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask_dir.parent().unwrap_or(xtask_dir).to_path_buf()
}

/// Changes into the workspace root (the VM shares the current directory
/// read-write, and cargo should see the whole workspace).
pub(crate) fn enter_root() -> Result<()> {
    let root = root();
    std::env::set_current_dir(&root)
        .map_err(|e| io_failure(format!("cannot enter {}", root.display()), e))
}

/// A file a guest or a sweep leaves for the host to read:
/// `target/xtask/NAME-PID` in the workspace, which the VM shares
/// read-write (a `CARGO_TARGET_DIR` elsewhere would be read-only in the
/// guest). Removed when dropped.
pub(crate) struct ScratchFile {
    path: PathBuf,
}

impl ScratchFile {
    /// Makes room for it: its directory exists, a stale file is gone.
    pub(crate) fn new(name: &str) -> Result<ScratchFile> {
        let dir = root().join("target").join("xtask");
        std::fs::create_dir_all(&dir)
            .map_err(|e| io_failure(format!("cannot create {}", dir.display()), e))?;
        let path = dir.join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Ok(ScratchFile { path })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// What it holds so far (nothing if it was never written).
    pub(crate) fn read(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap_or_default()
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Appends one line (a record of a sweep) to `file`.
pub(crate) fn append_line(file: &Path, line: &str) -> Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .and_then(|mut f| writeln!(f, "{line}"))
        .map_err(|e| io_failure(format!("cannot write {}", file.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_file_collects_lines_and_goes_away() {
        let file = ScratchFile::new("xtask-unit-test").unwrap();
        assert_eq!(file.read(), "");
        append_line(file.path(), "a").unwrap();
        append_line(file.path(), "b").unwrap();
        assert_eq!(file.read(), "a\nb\n");
        let path = file.path().to_path_buf();
        drop(file);
        assert!(!path.exists());
    }
}
