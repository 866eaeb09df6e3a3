//! The qemu command line.

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::vm::guest::Guest;
use crate::vm::kernel::Kernel;
use crate::vm::run_dir::RunDir;

/// Kernel command line. `acpi=noirq` and `cryptomgr.notests` each save
/// seconds under TCG; `dummy.numdummies=0` stops the dummy module from
/// creating dummy0 (stage 2 makes its own); `panic=-1` + `oops=panic` turn a
/// crash into a qemu exit instead of a hang.
const KERNEL_ARGS: &str = "console=ttyS0 panic=-1 quiet loglevel=4 mitigations=off tsc=reliable \
                           acpi=noirq cryptomgr.notests oops=panic dummy.numdummies=0";

/// How qemu runs the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Accel {
    /// KVM only if the CPU has vmx/svm and /dev/kvm is usable, else TCG.
    Auto,
    Tcg,
    Kvm,
}

impl Accel {
    /// `Auto` made concrete. (/dev/kvm can exist without vmx/svm, e.g. on a
    /// PVM-style nested host whose KVM only runs PVM guests: a stock kernel
    /// hangs or dies there, so the CPU flags decide.)
    pub(crate) fn resolve(self) -> Accel {
        if self != Accel::Auto {
            return self;
        }
        let cpu_has_vt = std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| {
            info.lines()
                .filter(|l| l.starts_with("flags"))
                .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"))
        });
        let kvm_usable = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_ok();
        if cpu_has_vt && kvm_usable {
            Accel::Kvm
        } else {
            Accel::Tcg
        }
    }
}

/// Machine settings shared by all guests of a run.
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    pub(crate) accel: Accel,
    pub(crate) mem: String,
    pub(crate) smp: u32,
    /// Show the guest console on our stderr instead of keeping it in a file.
    pub(crate) verbose: bool,
}

/// The qemu command for `guest`.
pub(crate) fn command(
    machine: &Machine,
    kernel: &Kernel,
    guest: &Guest,
    dir: &RunDir,
    rw_share: Option<&Path>,
) -> Command {
    let mut qemu = Command::new("qemu-system-x86_64");
    // Machine "pc" (i440fx) never hung in 15 boots; "microvm" boots ~0.6 s
    // faster but hung silently in early boot 5 times in 15 under TCG.
    qemu.args(["-M", "pc", "-accel"]);
    match machine.accel.resolve() {
        Accel::Kvm => qemu.args(["kvm", "-cpu", "host"]),
        // The default CPU model on purpose: `-cpu max` halves rxe bandwidth
        // (the guest then uses crc32-pclmul for the ICRC, slow under TCG).
        _ => qemu.arg("tcg"),
    };
    qemu.args(["-m", &machine.mem, "-smp", &machine.smp.to_string()]);
    qemu.args([
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
    ]);
    qemu.arg("-kernel")
        .arg(&kernel.image)
        .arg("-initrd")
        .arg(&kernel.initramfs);
    qemu.args(["-append", KERNEL_ARGS]);
    let console = if machine.verbose {
        Path::new("/proc/self/fd/2").to_path_buf()
    } else {
        dir.console_log()
    };
    qemu.arg("-chardev")
        .arg(option("file,id=con,append=on,path=", &console))
        .args(["-serial", "chardev:con"]);
    share(
        &mut qemu,
        "fsroot",
        Path::new("/"),
        "ferrovia_root",
        ",readonly=on",
    );
    share(&mut qemu, "fsctl", dir.path(), "ferrovia_ctl", "");
    if let Some(rw) = rw_share {
        share(&mut qemu, "fsrw", rw, "ferrovia_rw", "");
    }
    qemu.args(["-device", "virtio-serial-pci"]);
    for (id, fifo) in [("out", dir.stdout_fifo()), ("err", dir.stderr_fifo())] {
        qemu.arg("-chardev")
            .arg(option(&format!("file,id={id},path="), &fifo));
        qemu.args([
            "-device",
            &format!("virtserialport,chardev={id},name=ferrovia.std{id}"),
        ]);
    }
    // One NIC per wired rail, in rail order: the guest names them eth0,
    // eth1 in PCI order, which is this order (stage 2 checks the MACs).
    for (n, wire) in guest.wires().enumerate() {
        // dgram, not socket/stream: Nagle on a stream adds ~22 ms per trip
        // and makes rxe retransmit.
        let mut netdev = OsString::from(format!("dgram,id=n{n},local.type=unix,local.path="));
        netdev.push(escape(&wire.local_socket));
        netdev.push(",remote.type=unix,remote.path=");
        netdev.push(escape(&wire.remote_socket));
        qemu.arg("-netdev").arg(netdev);
        qemu.args([
            "-device",
            &format!("virtio-net-pci,netdev=n{n},mac={}", wire.mac),
        ]);
    }
    qemu.stdin(Stdio::null());
    qemu
}

/// A read-only or read-write 9p share of `path` with mount tag `tag`.
fn share(qemu: &mut Command, id: &str, path: &Path, tag: &str, extra: &str) {
    let fsdev = option(
        &format!("local,id={id},security_model=none,multidevs=remap{extra},path="),
        path,
    );
    qemu.arg("-fsdev").arg(fsdev);
    qemu.args([
        "-device",
        &format!("virtio-9p-pci,fsdev={id},mount_tag={tag}"),
    ]);
}

/// `prefix` followed by `path` with qemu's option escaping.
fn option(prefix: &str, path: &Path) -> OsString {
    let mut out = OsString::from(prefix);
    out.push(escape(path));
    out
}

/// qemu option values escape a comma by doubling it.
fn escape(path: &Path) -> OsString {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let mut bytes = Vec::new();
    for &b in path.as_os_str().as_bytes() {
        bytes.push(b);
        if b == b',' {
            bytes.push(b',');
        }
    }
    OsString::from_vec(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_commas_in_paths() {
        assert_eq!(escape(Path::new("/a,b/c")), OsString::from("/a,,b/c"));
        assert_eq!(
            option("file,path=", Path::new("/x")),
            OsString::from("file,path=/x")
        );
    }

    #[test]
    fn a_chosen_accel_stays() {
        assert_eq!(Accel::Tcg.resolve(), Accel::Tcg);
    }
}
