//! Where the VM harness keeps what it downloads and builds, and the lock
//! that makes concurrent first runs build it once.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::failure::{Failure, Result, io_failure};

/// Bump whenever the kernel/initramfs recipe changes: entries built by an
/// older recipe are rebuilt.
pub(crate) const RECIPE: &str = "ferrovia-vm recipe 1";

/// `$FERROVIA_VM_CACHE`, else `${XDG_CACHE_HOME:-$HOME/.cache}/ferrovia-vm`.
pub(crate) fn dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("FERROVIA_VM_CACHE").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME")
                .filter(|d| !d.is_empty())
                .ok_or_else(|| {
                    Failure::new(
                        "neither XDG_CACHE_HOME nor HOME is set: no place for the VM cache",
                    )
                })?;
            PathBuf::from(home).join(".cache")
        }
    };
    Ok(base.join("ferrovia-vm"))
}

/// Creates `dir` and its parents.
pub(crate) fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| io_failure(format!("cannot create {}", dir.display()), e))
}

/// An exclusive lock on `path` (created if needed), held until dropped.
pub(crate) fn lock(path: &Path) -> Result<File> {
    let file = File::create(path)
        .map_err(|e| io_failure(format!("cannot create {}", path.display()), e))?;
    file.lock()
        .map_err(|e| io_failure(format!("cannot lock {}", path.display()), e))?;
    Ok(file)
}

/// Whether the entry in `dir` is complete and built by the current recipe.
pub(crate) fn is_ready(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join(".ready")).is_ok_and(|r| r.trim() == RECIPE)
}

/// Marks the entry in `dir` as complete.
pub(crate) fn mark_ready(dir: &Path) -> Result<()> {
    let path = dir.join(".ready");
    std::fs::write(&path, format!("{RECIPE}\n"))
        .map_err(|e| io_failure(format!("cannot write {}", path.display()), e))
}
