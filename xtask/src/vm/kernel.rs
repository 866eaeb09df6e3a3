//! The guest kernel: Debian's stock `linux-image-amd64` kernel (it ships
//! `rdma_rxe`), downloaded and unpacked into the cache, never installed.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cmd;
use crate::failure::{Failure, Result, io_failure};
use crate::vm::{cache, initramfs, vmlinux};

/// A ready-to-boot kernel from the cache.
#[derive(Debug, Clone)]
pub(crate) struct Kernel {
    /// `vmlinux` when it could be extracted, else the bzImage `vmlinuz`.
    pub(crate) image: PathBuf,
    pub(crate) initramfs: PathBuf,
    /// `uname -r` of the guest, e.g. `6.1.0-56-amd64`.
    pub(crate) release: String,
    /// The extracted `lib/modules/<release>` (the guest reads it over 9p).
    pub(crate) modules: PathBuf,
}

/// The meta-package to follow: pinning a version breaks as soon as a
/// security update removes it from the mirror.
const META_PACKAGE: &str = "linux-image-amd64";

/// Returns the cached kernel, downloading and preparing it first if needed.
pub(crate) fn prepare(cache_dir: &Path) -> Result<Kernel> {
    if std::env::consts::ARCH != "x86_64" {
        return Err(Failure::new(
            "the VM harness boots an amd64 kernel and needs an x86_64 host",
        ));
    }
    let kernels = cache_dir.join("k");
    cache::create_dir(&kernels)?;
    let dir = match resolve_package(cache_dir)? {
        Some((package, version)) => {
            let dir = kernels.join(format!("{package}_{version}"));
            if !cache::is_ready(&dir) {
                let _lock = cache::lock(&kernels.join(".lock"))?;
                // Another run may have built it while we waited for the lock.
                if !cache::is_ready(&dir) {
                    build(&dir, &package, &version)?;
                }
            }
            dir
        }
        None => newest_ready(&kernels).ok_or_else(|| {
            Failure::new(format!(
                "cannot resolve the Debian kernel package ({META_PACKAGE}): no apt metadata \
                 (run `apt-get update` as root) and nothing cached in {}",
                kernels.display()
            ))
        })?,
    };
    load(&dir)
}

fn load(dir: &Path) -> Result<Kernel> {
    let release_file = dir.join("kver");
    let release = std::fs::read_to_string(&release_file)
        .map_err(|e| io_failure(format!("cannot read {}", release_file.display()), e))?
        .trim()
        .to_string();
    let vmlinux = dir.join("vmlinux");
    Ok(Kernel {
        image: if vmlinux.exists() {
            vmlinux
        } else {
            dir.join("vmlinuz")
        },
        initramfs: dir.join("initramfs.cpio"),
        modules: dir.join("root/lib/modules").join(&release),
        release,
    })
}

/// `(package, version)` of the kernel `linux-image-amd64` points to now, or
/// `None` without apt metadata. apt-cache takes ~1 s, so the answer is kept
/// until the apt lists change.
fn resolve_package(cache_dir: &Path) -> Result<Option<(String, String)>> {
    let memo = cache_dir.join("resolved");
    if let Some(answer) = fresh_memo(&memo) {
        return Ok(Some(answer));
    }
    let mut package = depends_of_meta_package();
    if package.is_none() && cmd::is_root() {
        eprintln!("xtask vm: no apt metadata for {META_PACKAGE}; running apt-get update");
        let _ = cmd::output(Command::new("apt-get").args(["update", "-q"]));
        package = depends_of_meta_package();
    }
    let Some(package) = package else {
        return Ok(None);
    };
    let policy =
        cmd::output_opt(Command::new("apt-cache").args(["policy", &package])).unwrap_or_default();
    let Some(version) = candidate_in_policy(&policy) else {
        return Ok(None);
    };
    let _ = std::fs::write(&memo, format!("{package} {version}\n"));
    Ok(Some((package, version)))
}

fn fresh_memo(memo: &Path) -> Option<(String, String)> {
    let memo_time = std::fs::metadata(memo).ok()?.modified().ok()?;
    let lists_time = std::fs::metadata("/var/lib/apt/lists")
        .ok()?
        .modified()
        .ok()?;
    if memo_time <= lists_time {
        return None;
    }
    let text = std::fs::read_to_string(memo).ok()?;
    let (package, version) = text.trim().split_once(' ')?;
    Some((package.to_string(), version.to_string()))
}

fn depends_of_meta_package() -> Option<String> {
    let text = cmd::output_opt(Command::new("apt-cache").args(["depends", META_PACKAGE]))?;
    kernel_in_depends(&text)
}

/// The `linux-image-<version>` line of `apt-cache depends linux-image-amd64`.
fn kernel_in_depends(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let package = line.trim().strip_prefix("Depends:")?.trim();
        let version = package.strip_prefix("linux-image-")?;
        version
            .starts_with(|c: char| c.is_ascii_digit())
            .then(|| package.to_string())
    })
}

/// The `Candidate:` of `apt-cache policy PACKAGE`.
fn candidate_in_policy(text: &str) -> Option<String> {
    let version = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Candidate:"))?
        .trim();
    (!version.is_empty() && version != "(none)").then(|| version.to_string())
}

/// The most recently built complete kernel in the cache.
fn newest_ready(kernels: &Path) -> Option<PathBuf> {
    std::fs::read_dir(kernels)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| cache::is_ready(p))
        .max_by_key(|p| {
            std::fs::metadata(p.join(".ready"))
                .and_then(|m| m.modified())
                .ok()
        })
}

/// Downloads, unpacks and prepares `package=version` into `dir`. Works in a
/// temporary directory renamed at the end, so an interrupted build leaves
/// nothing that looks ready.
fn build(dir: &Path, package: &str, version: &str) -> Result<()> {
    eprintln!(
        "xtask vm: preparing {package} {version} in {} (one-time, ~70 MB download)",
        dir.display()
    );
    let tmp = PathBuf::from(format!("{}.tmp.{}", dir.display(), std::process::id()));
    remove_leftovers(dir);
    let download = tmp.join("dl");
    cache::create_dir(&download)?;
    cmd::output(
        Command::new("apt-get")
            .args(["download", "-q", &format!("{package}={version}")])
            .current_dir(&download),
    )?;
    let deb = std::fs::read_dir(&download)
        .map_err(|e| io_failure(format!("cannot list {}", download.display()), e))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| {
            Failure::new(format!(
                "apt-get download {package}={version} produced no .deb"
            ))
        })?;
    let root = tmp.join("root");
    cmd::run(Command::new("dpkg").arg("-x").arg(&deb).arg(&root))?;
    let _ = std::fs::remove_dir_all(&download);

    let release = only_entry(&root.join("lib/modules"))?;
    if !contains_file_starting(&root.join("lib/modules").join(&release), "rdma_rxe.ko") {
        return Err(Failure::new(format!("{package} has no rdma_rxe module")));
    }
    // The .deb ships no modules.dep: modprobe (here and in the guest) needs it.
    cmd::run(Command::new("depmod").arg("-b").arg(&root).arg(&release))?;
    std::fs::write(tmp.join("kver"), format!("{release}\n"))
        .map_err(|e| io_failure("cannot write kver", e))?;
    let vmlinuz = tmp.join("vmlinuz");
    std::fs::copy(
        root.join("boot").join(format!("vmlinuz-{release}")),
        &vmlinuz,
    )
    .map_err(|e| io_failure(format!("{package} has no boot/vmlinuz-{release}"), e))?;
    if !vmlinux::extract(&vmlinuz, &tmp.join("vmlinux"))? {
        eprintln!("xtask vm: note: no ELF vmlinux in vmlinuz; booting the bzImage (slower)");
    }
    initramfs::build(&tmp, &root, &release)?;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&tmp, dir).map_err(|e| {
        io_failure(
            format!("cannot rename {} to {}", tmp.display(), dir.display()),
            e,
        )
    })?;
    cache::mark_ready(dir)
}

/// Removes `<dir>.tmp.*` directories of interrupted builds (we hold the lock).
fn remove_leftovers(dir: &Path) {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return;
    };
    let prefix = format!("{}.tmp.", name.to_string_lossy());
    for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn only_entry(dir: &Path) -> Result<String> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| io_failure(format!("cannot list {}", dir.display()), e))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    match names.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(Failure::new(format!(
            "expected one kernel release in {}, found {names:?}",
            dir.display()
        ))),
    }
}

fn contains_file_starting(dir: &Path, prefix: &str) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| {
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir {
                contains_file_starting(&entry.path(), prefix)
            } else {
                entry.file_name().to_string_lossy().starts_with(prefix)
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_meta_package() {
        let depends = "linux-image-amd64\n  Depends: linux-image-6.1.0-56-amd64\n";
        assert_eq!(
            kernel_in_depends(depends).as_deref(),
            Some("linux-image-6.1.0-56-amd64")
        );
        assert_eq!(
            kernel_in_depends("linux-image-amd64\n  Depends: linux-image-amd64-signed\n"),
            None
        );
        assert_eq!(kernel_in_depends(""), None);
    }

    #[test]
    fn reads_the_candidate_version() {
        let policy = "linux-image-6.1.0-56-amd64:\n  Installed: (none)\n  Candidate: 6.1.158-1\n";
        assert_eq!(candidate_in_policy(policy).as_deref(), Some("6.1.158-1"));
        assert_eq!(candidate_in_policy("x:\n  Candidate: (none)\n"), None);
    }
}
