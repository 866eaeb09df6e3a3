//! `cargo xtask deps [--check]`: the Debian packages the build, the tests and
//! the VM harness need, installed only when missing.

use std::path::Path;
use std::process::Command;

use crate::cmd;
use crate::failure::{Failure, Result};

/// Everything: building (bindgen needs libclang, the -sys crates need the
/// verbs/rdmacm/UCX/PMIx headers; the etcd client's protocol buffers need
/// `protoc` and the well-known types), the test tools (mpirun for the PMIx
/// bootstrap, etcd for the store-backed membership), and the VM harness.
pub(crate) const ALL: &[&str] = &[
    "libibverbs-dev",
    "librdmacm-dev",
    "ibverbs-providers",
    "rdma-core",
    "ibverbs-utils",
    "perftest",
    "rdmacm-utils",
    "clang",
    "libclang-dev",
    "pkg-config",
    "libucx-dev",
    "ucx-utils",
    "libpmix-dev",
    "openmpi-bin",
    "protobuf-compiler",
    "libprotobuf-dev",
    "etcd-server",
    "etcd-client",
    "qemu-system-x86",
    "busybox-static",
    "kmod",
    "xz-utils",
    "iproute2",
];

/// What `cargo xtask vm` needs: qemu, the initramfs userland, depmod and
/// modprobe for the extracted kernel, xz for vmlinux, and the user-space half
/// of rxe plus `ip`/`rdma`, which the guest runs from the host's filesystem;
/// with the C peers the interop device tests start there (rdmacm-utils'
/// `rdma_server`, `rdma_client` and `rping`; perftest).
pub(crate) const VM: &[&str] = &[
    "qemu-system-x86",
    "busybox-static",
    "kmod",
    "xz-utils",
    "iproute2",
    "rdma-core",
    "ibverbs-providers",
    "ibverbs-utils",
    "rdmacm-utils",
    "perftest",
];

/// What `cargo xtask softroce` needs on a host with its own rdma_rxe.
pub(crate) const SOFTROCE: &[&str] = &[
    "kmod",
    "iproute2",
    "rdma-core",
    "ibverbs-providers",
    "ibverbs-utils",
];

/// `cargo xtask deps [--check]`.
pub(crate) fn command(check_only: bool) -> Result<u8> {
    if !is_debian_like() {
        return Err(not_debian(ALL));
    }
    let missing = missing(ALL)?;
    if missing.is_empty() {
        say!("xtask deps: all {} packages are installed", ALL.len());
        return Ok(0);
    }
    if check_only {
        say!("xtask deps: missing: {}", missing.join(" "));
        return Ok(1);
    }
    install(&missing)?;
    Ok(0)
}

/// Makes sure `packages` are installed (installing them when root). On a
/// non-Debian host this only warns: the packages may exist under other names.
pub(crate) fn ensure(packages: &[&str]) -> Result<()> {
    if !is_debian_like() {
        eprintln!("xtask deps: warning: {}", not_debian(packages));
        return Ok(());
    }
    let missing = missing(packages)?;
    if missing.is_empty() {
        Ok(())
    } else {
        install(&missing)
    }
}

fn is_debian_like() -> bool {
    cmd::find_in_path("apt-get").is_some() && cmd::find_in_path("dpkg-query").is_some()
}

fn not_debian(packages: &[&str]) -> Failure {
    Failure::new(format!(
        "this is not a Debian/Ubuntu host (no apt-get/dpkg-query); install the equivalents of: {}",
        packages.join(" ")
    ))
}

/// The packages of `packages` that dpkg does not report as installed.
fn missing(packages: &[&str]) -> Result<Vec<String>> {
    // dpkg-query exits 1 when some package is unknown but still lists the
    // others, so its stdout is read regardless of the status.
    let out = Command::new("dpkg-query")
        .arg("-W")
        .arg("-f=${Package} ${Status}\n")
        .args(packages)
        .output()
        .map_err(|e| Failure::new(format!("cannot run dpkg-query: {e}")))?;
    let listing = String::from_utf8_lossy(&out.stdout);
    Ok(missing_from_listing(packages, &listing))
}

fn missing_from_listing(packages: &[&str], listing: &str) -> Vec<String> {
    let installed: Vec<&str> = listing
        .lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(_, status)| status.trim() == "install ok installed")
        .map(|(name, _)| name.split(':').next().unwrap_or(name))
        .collect();
    packages
        .iter()
        .filter(|p| !installed.contains(p))
        .map(|p| p.to_string())
        .collect()
}

fn install(missing: &[String]) -> Result<()> {
    let line = format!(
        "apt-get install -y --no-install-recommends {}",
        missing.join(" ")
    );
    if !cmd::is_root() {
        return Err(Failure::new(format!(
            "missing packages: {}\nrun as root once, or:\n  sudo {line}",
            missing.join(" ")
        )));
    }
    eprintln!("xtask deps: installing {}", missing.join(" "));
    if apt_lists_empty() {
        apt_get(&["update", "-q"])?;
    }
    let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
    args.extend(missing.iter().map(String::as_str));
    if apt_get(&args).is_err() {
        eprintln!("xtask deps: install failed; running apt-get update and retrying");
        apt_get(&["update", "-q"])?;
        apt_get(&args).map_err(|e| e.context(format!("`{line}` failed")))?;
    }
    Ok(())
}

fn apt_get(args: &[&str]) -> Result<()> {
    cmd::run(
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

/// No package lists at all (a fresh container): `apt-get install` would fail.
fn apt_lists_empty() -> bool {
    let dir = Path::new("/var/lib/apt/lists");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return true;
    };
    !entries
        .flatten()
        .any(|e| e.file_name().to_string_lossy().ends_with("_Packages"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_marks_only_fully_installed_packages() {
        let listing = "kmod install ok installed\n\
                       xz-utils deinstall ok config-files\n\
                       libc6:amd64 install ok installed\n";
        let missing =
            missing_from_listing(&["kmod", "xz-utils", "libc6", "qemu-system-x86"], listing);
        assert_eq!(missing, ["xz-utils", "qemu-system-x86"]);
    }
}
