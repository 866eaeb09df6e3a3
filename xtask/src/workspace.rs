//! The workspace root, so that `cargo xtask test`/`demo` behave the same
//! from any directory.

use std::path::{Path, PathBuf};

use crate::failure::{Result, io_failure};

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
