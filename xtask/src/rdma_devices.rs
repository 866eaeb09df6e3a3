//! The RDMA devices the host kernel itself offers (real HCAs or soft-RoCE).

use std::path::Path;

/// Names under `/sys/class/infiniband`, sorted; empty without RDMA.
pub(crate) fn host_devices() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/sys/class/infiniband") else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Whether the host has the RDMA device `name`.
pub(crate) fn host_has(name: &str) -> bool {
    Path::new("/sys/class/infiniband").join(name).exists()
}
