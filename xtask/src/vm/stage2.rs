//! Stage 2: the guest's PID 1 after switch_root, run by the host's own bash
//! on the overlay root. It loads the RDMA modules from the cached kernel
//! tree, sets up a netdev and a soft-RoCE device per rail (rxe0, rxe1),
//! then runs the command with the caller's environment and reports its
//! exit status.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::failure::Result;
use crate::vm::guest::{Guest, Link, Rail};
use crate::vm::kernel::Kernel;
use crate::vm::run_dir::RunDir;

/// Every process start costs ~40 ms under TCG: the script prefers builtins.
const STAGE2: &str = r#"#!/bin/bash
# ferrovia-vm stage 2 (guest PID 1); written by `cargo xtask vm`.
_sr_c=/run/ferrovia-vm
. "$_sr_c/config.sh"
_sr_end() { echo "$1" > "$_sr_c/status"; sync; echo o > /proc/sysrq-trigger; sleep 30; }
_sr_fail() {
  echo "ferrovia-vm stage 2: $*"; echo "stage 2: $*" > "$_sr_c/failed"
  dmesg | tail -20; _sr_end 125
}
: > "$_sr_c/booted"
_sr_t() { local up; read -r up _ < /proc/uptime; echo "ferrovia-vm: [uptime $up] $*"; }
_sr_t "stage 2 started"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
echo "$SR_HOSTNAME" > /proc/sys/kernel/hostname
# The modules come from the kernel tree in the xtask cache (visible through
# the 9p root). Bound where modprobe looks, the kernel's own request_module()
# also works (rxe needs crc32_generic, which only loads that way).
mkdir -p "/lib/modules/$SR_KVER" && mount --bind "$SR_MODDIR" "/lib/modules/$SR_KVER" ||
  _sr_fail "bind modules"
_sr_sleep() { read -r -t "$1" <> <(:) || true; }
modprobe -a $SR_MODULES || _sr_fail "modprobe"
# A virtio-net NIC appears a moment after its driver loads; each must be the
# NIC qemu gave that rail (its MAC says which wire it is on).
for r in "${!SR_MAC[@]}"; do
  [ -n "${SR_MAC[r]}" ] || continue
  _sr_mac=""
  for ((i = 0; i < 100; i++)); do
    read -r _sr_mac 2>/dev/null < "/sys/class/net/${SR_NETDEV[r]}/address" && break; _sr_sleep 0.05
  done
  [ "$_sr_mac" = "${SR_MAC[r]}" ] || _sr_fail "${SR_NETDEV[r]} has MAC '$_sr_mac', not ${SR_MAC[r]}"
done
ip -batch "$_sr_c/ip.batch" || _sr_fail "netdev setup (${SR_NETDEV[*]})"
_sr_t "modules loaded, ${SR_NETDEV[*]} up"
rdma -b "$_sr_c/rdma.batch" || _sr_fail "rdma link add"
for r in "${!SR_RXE[@]}"; do
  _sr_st=""
  for ((i = 0; i < 100; i++)); do
    read -r _sr_st 2>/dev/null < "/sys/class/infiniband/${SR_RXE[r]}/ports/1/state"
    [[ $_sr_st == *ACTIVE* ]] && break; _sr_sleep 0.05
  done
  [[ $_sr_st == *ACTIVE* ]] || _sr_fail "${SR_RXE[r]} port not ACTIVE ($_sr_st)"
  _sr_t "${SR_RXE[r]} ACTIVE on ${SR_NETDEV[r]} (${SR_IP[r]})"
done
# The command's stdout/stderr go to two virtio-serial ports that qemu writes
# to FIFOs on the host; the serial console (ttyS0) carries only logs.
_sr_out=/dev/console _sr_err=/dev/console
for p in /sys/class/virtio-ports/*; do
  read -r _sr_n < "$p/name" || continue
  case $_sr_n in
    ferrovia.stdout) _sr_out=/dev/${p##*/} ;; ferrovia.stderr) _sr_err=/dev/${p##*/} ;;
  esac
done
# The caller's environment (NUL-separated; later entries win), minus bash's own.
while IFS= read -r -d '' _sr_kv; do
  case ${_sr_kv%%=*} in
    BASH*|SHELLOPTS|PWD|OLDPWD|SHLVL|_|EUID|UID|PPID|GROUPS|HOSTNAME) ;;
    *) [[ ${_sr_kv%%=*} =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && export "$_sr_kv" 2>/dev/null ;;
  esac
done < "$_sr_c/env"
mapfile -d '' -t _sr_args < "$_sr_c/args"
cd "$SR_CWD" || _sr_fail "cd $SR_CWD"
ulimit -l unlimited                             # memory registration
: > "$_sr_c/up"
_sr_t "running: ${_sr_args[*]}"
"${_sr_args[@]}" < /dev/null > "$_sr_out" 2> "$_sr_err"
_sr_rc=$?
_sr_t "command exited $_sr_rc"
if [ "$_sr_rc" != 0 ]; then
  # rxe retransmits and drops show here: the first thing to look at when a
  # device test fails.
  _sr_hw=""
  for d in "${SR_RXE[@]}"; do
    _sr_hw+=" $d:"; _sr_any=0
    for f in /sys/class/infiniband/$d/ports/1/hw_counters/*; do
      read -r v < "$f" 2>/dev/null || continue
      [ "$v" = 0 ] || [ "${f##*/}" = lifespan ] || { _sr_hw+=" ${f##*/}=$v"; _sr_any=1; }
    done
    [ "$_sr_any" = 1 ] || _sr_hw+=" none"
  done
  echo "xtask vm (guest): command exited $_sr_rc; hw_counters (non-zero):$_sr_hw" > "$_sr_err"
fi
_sr_end "$_sr_rc"
"#;

/// Writes everything stage 2 reads into `dir`: the script, its config, the
/// `ip` and `rdma` batches that make the rails, the command (`args`,
/// NUL-separated), the environment (`env`) and the read-write share
/// (`rwdir`, read by stage 1).
pub(crate) fn write_run_files(
    dir: &RunDir,
    kernel: &Kernel,
    guest: &Guest,
    command: &[OsString],
    cwd: &Path,
    rw_share: Option<&Path>,
) -> Result<()> {
    dir.write("stage2.sh", STAGE2.as_bytes())?;
    dir.write("config.sh", &config(kernel, guest, cwd))?;
    dir.write("ip.batch", ip_batch(guest).as_bytes())?;
    dir.write("rdma.batch", rdma_batch(guest).as_bytes())?;
    dir.write(
        "args",
        &nul_separated(command.iter().map(|a| a.as_bytes().to_vec())),
    )?;
    let mut env: Vec<Vec<u8>> = std::env::vars_os()
        .map(|(k, v)| [k.as_bytes(), b"=", v.as_bytes()].concat())
        .collect();
    env.extend(
        guest
            .env
            .iter()
            .map(|(k, v)| format!("{k}={v}").into_bytes()),
    );
    dir.write("env", &nul_separated(env.into_iter()))?;
    dir.write(
        "rwdir",
        rw_share
            .map(|p| p.as_os_str().as_bytes())
            .unwrap_or_default(),
    )
}

/// The modules stage 2 loads: virtio_net first when there are NICs, so
/// they probe while the rest loads; `dummy` only when a rail needs one.
fn modules(guest: &Guest) -> String {
    let wired = guest.wires().next().is_some();
    let dummy = guest.rails.iter().any(|r| r.link == Link::Dummy);
    let mut list = vec!["virtio_console"];
    list.extend(wired.then_some("virtio_net"));
    list.extend(["rdma_rxe", "rdma_ucm", "ib_umad"]);
    list.extend(dummy.then_some("dummy"));
    list.join(" ")
}

/// Every rail's netdev, addressed and up, in one `ip` process.
fn ip_batch(guest: &Guest) -> String {
    let mut out = String::from("link set lo up\n");
    for rail in &guest.rails {
        let dev = &rail.netdev;
        if rail.link == Link::Dummy {
            out += &format!("link add {dev} type dummy\n");
        }
        out += &format!("addr add {} dev {dev}\nlink set {dev} up\n", rail.cidr);
    }
    out
}

/// Every rail's soft-RoCE device, in one `rdma` process.
fn rdma_batch(guest: &Guest) -> String {
    guest
        .rails
        .iter()
        .map(|r| format!("link add {} type rxe netdev {}\n", r.rxe, r.netdev))
        .collect()
}

fn config(kernel: &Kernel, guest: &Guest, cwd: &Path) -> Vec<u8> {
    let modules = modules(guest);
    let scalars: [(&str, &[u8]); 5] = [
        ("SR_KVER", kernel.release.as_bytes()),
        ("SR_MODDIR", kernel.modules.as_os_str().as_bytes()),
        ("SR_HOSTNAME", guest.hostname.as_bytes()),
        ("SR_MODULES", modules.as_bytes()),
        ("SR_CWD", cwd.as_os_str().as_bytes()),
    ];
    let mut out = Vec::new();
    for (name, value) in scalars {
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(&shell_quote(value));
        out.push(b'\n');
    }
    // Bash arrays, one element per rail (an empty MAC: no NIC to check).
    let rails = &guest.rails;
    let arrays: [(&str, Vec<&str>); 4] = [
        ("SR_RXE", rails.iter().map(|r| r.rxe).collect()),
        (
            "SR_NETDEV",
            rails.iter().map(|r| r.netdev.as_str()).collect(),
        ),
        ("SR_IP", rails.iter().map(Rail::ip).collect()),
        ("SR_MAC", rails.iter().map(mac).collect()),
    ];
    for (name, values) in arrays {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"=(");
        for (i, value) in values.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            out.extend_from_slice(&shell_quote(value.as_bytes()));
        }
        out.extend_from_slice(b")\n");
    }
    out
}

/// The MAC stage 2 expects on a rail's netdev; none on a dummy.
fn mac(rail: &Rail) -> &str {
    match &rail.link {
        Link::Wire(wire) => &wire.mac,
        Link::Dummy => "",
    }
}

/// `value` as one single-quoted shell word.
fn shell_quote(value: &[u8]) -> Vec<u8> {
    let mut out = vec![b'\''];
    for &byte in value {
        if byte == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(byte);
        }
    }
    out.push(b'\'');
    out
}

fn nul_separated(items: impl Iterator<Item = Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for item in items {
        out.extend_from_slice(&item);
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn quotes_for_the_shell() {
        assert_eq!(shell_quote(b"/a b/c"), b"'/a b/c'");
        assert_eq!(shell_quote(b"it's"), b"'it'\\''s'");
        assert_eq!(shell_quote(b""), b"''");
    }

    #[test]
    fn one_host_makes_a_dummy_and_a_device_per_rail() {
        let guest = &crate::vm::guest::plan(1, |_| PathBuf::new())[0];
        assert_eq!(
            ip_batch(guest),
            "link set lo up\n\
             link add rxenet0 type dummy\naddr add 192.168.77.1/24 dev rxenet0\nlink set rxenet0 up\n\
             link add rxenet1 type dummy\naddr add 192.168.87.1/24 dev rxenet1\nlink set rxenet1 up\n"
        );
        assert_eq!(
            rdma_batch(guest),
            "link add rxe0 type rxe netdev rxenet0\nlink add rxe1 type rxe netdev rxenet1\n"
        );
        assert_eq!(
            modules(guest),
            "virtio_console rdma_rxe rdma_ucm ib_umad dummy"
        );
    }

    #[test]
    fn two_hosts_address_both_nics_and_check_their_macs() {
        let guest = &crate::vm::guest::plan(2, |i| PathBuf::from(format!("/r/{i}")))[1];
        assert_eq!(
            ip_batch(guest),
            "link set lo up\n\
             addr add 192.168.78.2/24 dev eth0\nlink set eth0 up\n\
             addr add 192.168.88.2/24 dev eth1\nlink set eth1 up\n"
        );
        assert_eq!(
            modules(guest),
            "virtio_console virtio_net rdma_rxe rdma_ucm ib_umad"
        );
        let kernel = Kernel {
            image: PathBuf::new(),
            initramfs: PathBuf::new(),
            release: "6.1.0-57-amd64".into(),
            modules: PathBuf::from("/k/root/lib/modules/6.1.0-57-amd64"),
        };
        let text = String::from_utf8(config(&kernel, guest, Path::new("/w"))).unwrap();
        assert!(text.contains("SR_RXE=('rxe0' 'rxe1')\n"), "{text}");
        assert!(
            text.contains("SR_IP=('192.168.78.2' '192.168.88.2')\n"),
            "{text}"
        );
        assert!(
            text.contains("SR_MAC=('52:54:00:00:78:02' '52:54:00:00:88:02')\n"),
            "{text}"
        );
    }

    #[test]
    fn separates_with_nul() {
        let joined = nul_separated(["sh", "-c", "exit 7"].iter().map(|s| s.as_bytes().to_vec()));
        assert_eq!(joined, b"sh\0-c\0exit 7\0");
    }
}
