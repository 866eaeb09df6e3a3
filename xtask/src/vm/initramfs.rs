//! The guest's initramfs: static busybox, the few modules needed to reach
//! the host's filesystem, and the stage-1 `/init` that switches into it.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::cmd;
use crate::failure::{Failure, Result, io_failure};
use crate::vm::cache;

/// Debian builds virtio, 9p and overlayfs as modules; these (and their
/// dependencies) must be in the initramfs. Everything else is loaded later
/// by the host's own modprobe from the extracted module tree.
const INITRD_MODULES: &[&str] = &["virtio_pci", "9pnet_virtio", "9p", "overlay"];

const BUSYBOX_APPLETS: &[&str] = &[
    "sh",
    "mount",
    "umount",
    "insmod",
    "mkdir",
    "cat",
    "ln",
    "switch_root",
    "poweroff",
    "sleep",
    "echo",
];

/// Stage 1, `/init` (busybox sh, PID 1): load the modules, mount the host's
/// `/` read-only over 9p under a RAM-backed overlay, mount the control and
/// read-write shares, then switch_root into the host's userland and run
/// stage 2 (written per run into the control share) with the host's bash.
const STAGE1: &str = r#"#!/bin/sh
# ferrovia-vm stage 1 (initramfs); written by `cargo xtask vm`.
export PATH=/bin
fail() {
  echo "ferrovia-vm stage 1: $*"
  if [ -w /ctl ]; then echo "stage 1: $*" > /ctl/failed; echo 125 > /ctl/status; fi
  poweroff -f
}
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
while read -r m; do insmod "/mods/$m.ko" || fail "insmod $m"; done < /mods/order
O=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o $O,cache=none ferrovia_ctl /ctl || fail "mount control share"
mount -t 9p -o $O,ro,cache=loose ferrovia_root /lower || fail "mount host root"
mount -t tmpfs -o mode=0755 tmpfs /rw && mkdir /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot ||
  fail "overlay mount"
RW=$(cat /ctl/rwdir)
if [ -n "$RW" ]; then
  mkdir -p "/newroot$RW"
  mount -t 9p -o $O,cache=mmap ferrovia_rw "/newroot$RW" || fail "mount read-write share $RW"
fi
mount -t tmpfs -o mode=0755 tmpfs /newroot/run && mkdir /newroot/run/ferrovia-vm
mount --move /ctl /newroot/run/ferrovia-vm
mkdir -p /dev/pts /dev/shm
mount -t devpts -o mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
ln -s /proc/self/fd /dev/fd; ln -s fd/0 /dev/stdin; ln -s fd/1 /dev/stdout; ln -s fd/2 /dev/stderr
for d in proc sys dev; do mount --move /$d /newroot/$d; done
exec switch_root /newroot /bin/bash /run/ferrovia-vm/stage2.sh
"#;

/// Builds `<out>/initramfs.cpio` for kernel `release`, whose modules are
/// under `<modroot>/lib/modules/<release>` (with modules.dep).
pub(crate) fn build(out: &Path, modroot: &Path, release: &str) -> Result<PathBuf> {
    let tree = out.join("initrd");
    for sub in [
        "bin", "dev", "proc", "sys", "ctl", "lower", "rw", "newroot", "mods",
    ] {
        cache::create_dir(&tree.join(sub))?;
    }
    let busybox = Path::new("/bin/busybox");
    copy(busybox, &tree.join("bin/busybox"))?;
    for applet in BUSYBOX_APPLETS {
        let link = tree.join("bin").join(applet);
        std::os::unix::fs::symlink("busybox", &link)
            .map_err(|e| io_failure(format!("cannot create {}", link.display()), e))?;
    }
    let mut order = String::new();
    for module in module_files(modroot, release)? {
        let name = module_name(&module);
        unpack_module(&module, &tree.join("mods").join(format!("{name}.ko")))?;
        order.push_str(&name);
        order.push('\n');
    }
    write(&tree.join("mods/order"), order.as_bytes())?;
    let init = tree.join("init");
    write(&init, STAGE1.as_bytes())?;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| io_failure(format!("cannot chmod {}", init.display()), e))?;
    let archive = out.join("initramfs.cpio");
    cpio(&tree, &archive)?;
    let _ = std::fs::remove_dir_all(&tree);
    Ok(archive)
}

/// The module files (with dependencies, in load order, no duplicates).
fn module_files(modroot: &Path, release: &str) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for module in INITRD_MODULES {
        let plan = cmd::output(Command::new("modprobe").arg("-d").arg(modroot).args([
            "-S",
            release,
            "--show-depends",
            module,
        ]))?;
        for line in plan.lines() {
            let mut words = line.split_whitespace();
            if words.next() == Some("insmod")
                && let Some(path) = words.next()
                && !files.iter().any(|f| f == Path::new(path))
            {
                files.push(PathBuf::from(path));
            }
        }
    }
    if files.is_empty() {
        return Err(Failure::new(format!(
            "modprobe found none of {} for {release}",
            INITRD_MODULES.join(" ")
        )));
    }
    Ok(files)
}

/// `.../9pnet_virtio.ko.xz` -> `9pnet_virtio`.
fn module_name(path: &Path) -> String {
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    file.split(".ko").next().unwrap_or(&file).to_string()
}

/// busybox insmod wants plain `.ko` files.
fn unpack_module(from: &Path, to: &Path) -> Result<()> {
    let file = from.to_string_lossy();
    let decompressor = if file.ends_with(".ko.xz") {
        Some(["xz", "-dc"])
    } else if file.ends_with(".ko.zst") {
        Some(["zstd", "-dcq"])
    } else if file.ends_with(".ko.gz") {
        Some(["gzip", "-dc"])
    } else {
        None
    };
    let Some([program, flags]) = decompressor else {
        return copy(from, to);
    };
    let out = std::fs::File::create(to)
        .map_err(|e| io_failure(format!("cannot create {}", to.display()), e))?;
    cmd::run(Command::new(program).arg(flags).arg(from).stdout(out))
}

/// `find . | busybox cpio -o -H newc` in `tree`.
fn cpio(tree: &Path, archive: &Path) -> Result<()> {
    let mut list = String::from(".\n");
    list_tree(tree, Path::new("."), &mut list)?;
    let out = std::fs::File::create(archive)
        .map_err(|e| io_failure(format!("cannot create {}", archive.display()), e))?;
    let mut child = Command::new("/bin/busybox")
        .args(["cpio", "-o", "-H", "newc"])
        .current_dir(tree)
        .stdin(Stdio::piped())
        .stdout(out)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Failure::new(format!("cannot run busybox cpio: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(list.as_bytes())
            .map_err(|e| io_failure("busybox cpio", e))?;
    }
    let status = child.wait().map_err(|e| io_failure("busybox cpio", e))?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure::new(format!("busybox cpio failed ({status})")))
    }
}

/// Appends every path below `dir` (as `./relative`), parents first.
fn list_tree(dir: &Path, relative: &Path, list: &mut String) -> Result<()> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| io_failure(format!("cannot list {}", dir.display()), e))?;
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let rel = relative.join(entry.file_name());
        list.push_str(&rel.to_string_lossy());
        list.push('\n');
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            list_tree(&entry.path(), &rel, list)?;
        }
    }
    Ok(())
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to).map(drop).map_err(|e| {
        io_failure(
            format!("cannot copy {} to {}", from.display(), to.display()),
            e,
        )
    })
}

fn write(path: &Path, data: &[u8]) -> Result<()> {
    std::fs::write(path, data)
        .map_err(|e| io_failure(format!("cannot write {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names_drop_compression_suffixes() {
        assert_eq!(
            module_name(Path::new("/k/net/9p/9pnet_virtio.ko.xz")),
            "9pnet_virtio"
        );
        assert_eq!(module_name(Path::new("/k/fs/overlay.ko")), "overlay");
    }
}
