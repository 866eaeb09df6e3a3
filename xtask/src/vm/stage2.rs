//! Stage 2: the guest's PID 1 after switch_root, run by the host's own bash
//! on the overlay root. It loads the RDMA modules from the cached kernel
//! tree, sets up the network and rxe0, then runs the command with the
//! caller's environment and reports its exit status.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::failure::Result;
use crate::vm::guest::{Guest, GuestNet, RXE};
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
if [ "$SR_NET" = wire ]; then
  modprobe -a virtio_console virtio_net rdma_rxe rdma_ucm ib_umad || _sr_fail "modprobe"
  for ((i = 0; i < 100; i++)); do [ -e "/sys/class/net/$SR_NETDEV" ] && break; _sr_sleep 0.05; done
  ip -batch - <<IPCMDS || _sr_fail "$SR_NETDEV setup"
link set lo up
addr add $SR_IPCIDR dev $SR_NETDEV
link set $SR_NETDEV up
IPCMDS
else
  modprobe -a virtio_console rdma_rxe rdma_ucm ib_umad dummy || _sr_fail "modprobe"
  ip -batch - <<IPCMDS || _sr_fail "dummy netdev setup"
link set lo up
link add $SR_NETDEV type dummy
addr add $SR_IPCIDR dev $SR_NETDEV
link set $SR_NETDEV up
IPCMDS
fi
_sr_t "modules loaded, $SR_NETDEV up"
rdma link add "$SR_RXE" type rxe netdev "$SR_NETDEV" || _sr_fail "rdma link add"
_sr_st=""
for ((i = 0; i < 100; i++)); do
  read -r _sr_st 2>/dev/null < "/sys/class/infiniband/$SR_RXE/ports/1/state"
  [[ $_sr_st == *ACTIVE* ]] && break; _sr_sleep 0.05
done
[[ $_sr_st == *ACTIVE* ]] || _sr_fail "$SR_RXE port not ACTIVE ($_sr_st)"
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
export SOFTROCE_VM=1 SOFTROCE_DEV="$SR_RXE" SOFTROCE_NETDEV="$SR_NETDEV" SOFTROCE_IP="${SR_IPCIDR%/*}"
mapfile -d '' -t _sr_args < "$_sr_c/args"
cd "$SR_CWD" || _sr_fail "cd $SR_CWD"
ulimit -l unlimited                             # memory registration
: > "$_sr_c/up"
_sr_t "$SR_RXE up on $SR_NETDEV (${SR_IPCIDR%/*}), running: ${_sr_args[*]}"
"${_sr_args[@]}" < /dev/null > "$_sr_out" 2> "$_sr_err"
_sr_rc=$?
_sr_t "command exited $_sr_rc"
if [ "$_sr_rc" != 0 ]; then
  # rxe retransmits and drops show here: the first thing to look at when a
  # device test fails.
  _sr_hw=""
  for f in /sys/class/infiniband/$SR_RXE/ports/1/hw_counters/*; do
    read -r v < "$f" 2>/dev/null || continue
    [ "$v" = 0 ] || [ "${f##*/}" = lifespan ] || _sr_hw+=" ${f##*/}=$v"
  done
  echo "xtask vm (guest): command exited $_sr_rc; $SR_RXE hw_counters (non-zero):${_sr_hw:- none}" > "$_sr_err"
fi
_sr_end "$_sr_rc"
"#;

/// Writes everything stage 2 reads into `dir`: the script, its config, the
/// command (`args`, NUL-separated), the environment (`env`) and the
/// read-write share (`rwdir`, read by stage 1).
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

fn config(kernel: &Kernel, guest: &Guest, cwd: &Path) -> Vec<u8> {
    let net_kind: &[u8] = match guest.net {
        GuestNet::Dummy { .. } => b"dummy",
        GuestNet::Wire { .. } => b"wire",
    };
    let vars: [(&str, &[u8]); 8] = [
        ("SR_KVER", kernel.release.as_bytes()),
        ("SR_MODDIR", kernel.modules.as_os_str().as_bytes()),
        ("SR_HOSTNAME", guest.hostname.as_bytes()),
        ("SR_NET", net_kind),
        ("SR_NETDEV", guest.net.netdev().as_bytes()),
        ("SR_IPCIDR", guest.net.cidr().as_bytes()),
        ("SR_RXE", RXE.as_bytes()),
        ("SR_CWD", cwd.as_os_str().as_bytes()),
    ];
    let mut out = Vec::new();
    for (name, value) in vars {
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(&shell_quote(value));
        out.push(b'\n');
    }
    out
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
    use super::*;

    #[test]
    fn quotes_for_the_shell() {
        assert_eq!(shell_quote(b"/a b/c"), b"'/a b/c'");
        assert_eq!(shell_quote(b"it's"), b"'it'\\''s'");
        assert_eq!(shell_quote(b""), b"''");
    }

    #[test]
    fn separates_with_nul() {
        let joined = nul_separated(["sh", "-c", "exit 7"].iter().map(|s| s.as_bytes().to_vec()));
        assert_eq!(joined, b"sh\0-c\0exit 7\0");
    }
}
