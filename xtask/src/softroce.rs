//! `cargo xtask softroce [--down]`: a soft-RoCE device `rxe0` on the host
//! itself, for machines whose kernel can load `rdma_rxe`. Containers and
//! locked-down kernels cannot: they use `cargo xtask vm` instead.

use std::path::Path;
use std::process::Command;

use crate::failure::{Failure, Result};
use crate::{cmd, deps, rdma_devices};

const RXE: &str = "rxe0";
/// Created only when no suitable interface exists; removed by `--down`.
const DUMMY: &str = "rxenet0";
const DUMMY_CIDR: &str = "192.168.77.1/24";

/// `cargo xtask softroce [--down]`.
pub(crate) fn command(down: bool) -> Result<u8> {
    if down { self::down() } else { up() }
}

fn up() -> Result<u8> {
    if rdma_devices::host_has(RXE) {
        say!("xtask softroce: {RXE} already exists");
        return Ok(0);
    }
    if !cmd::is_root() {
        return Err(Failure::new(
            "creating a soft-RoCE device needs root (modprobe, rdma link add)",
        ));
    }
    deps::ensure(deps::SOFTROCE)?;
    load_rxe_module()?;
    let netdev = match first_up_ipv4_netdev()? {
        Some(name) => name,
        None => {
            create_dummy()?;
            DUMMY.to_string()
        }
    };
    cmd::run(Command::new("rdma").args(["link", "add", RXE, "type", "rxe", "netdev", &netdev]))?;
    say!("xtask softroce: {RXE} is up on {netdev}");
    Ok(0)
}

fn down() -> Result<u8> {
    if rdma_devices::host_has(RXE) {
        cmd::run(Command::new("rdma").args(["link", "delete", RXE]))?;
        say!("xtask softroce: removed {RXE}");
    } else {
        say!("xtask softroce: no {RXE} to remove");
    }
    if Path::new("/sys/class/net").join(DUMMY).exists() {
        cmd::run(Command::new("ip").args(["link", "delete", DUMMY]))?;
        say!("xtask softroce: removed {DUMMY}");
    }
    Ok(0)
}

fn load_rxe_module() -> Result<()> {
    if Path::new("/sys/module/rdma_rxe").exists() {
        return Ok(());
    }
    let out = Command::new("modprobe").arg("rdma_rxe").output();
    let why = match out {
        Ok(out) if out.status.success() => return Ok(()),
        Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_string(),
        Err(e) => format!("cannot run modprobe: {e}"),
    };
    Err(Failure::new(format!(
        "this host cannot load the rdma_rxe kernel module ({why}).\n\
         Containers and kernels without loadable modules cannot have a host soft-RoCE device;\n\
         use `cargo xtask vm -- CMD` to run CMD in a qemu VM that has {RXE} \
         (`cargo xtask test` does that by itself)"
    )))
}

/// The first UP non-loopback interface with an IPv4 address.
fn first_up_ipv4_netdev() -> Result<Option<String>> {
    let listing = cmd::output(Command::new("ip").args(["-o", "-4", "addr", "show", "up"]))?;
    Ok(first_ipv4_netdev_in(&listing))
}

/// Parses `ip -o -4 addr show up` lines such as
/// `4: eth0    inet 192.0.2.2/24 brd ... scope global eth0\ ...`.
fn first_ipv4_netdev_in(listing: &str) -> Option<String> {
    listing.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let name = fields.nth(1)?;
        let name = name.split('@').next().unwrap_or(name);
        (fields.next() == Some("inet") && name != "lo").then(|| name.to_string())
    })
}

fn create_dummy() -> Result<()> {
    // The dummy driver may be a module; failure here shows in `ip link add`.
    let _ = Command::new("modprobe").arg("dummy").status();
    cmd::run(Command::new("ip").args(["link", "add", DUMMY, "type", "dummy"]))?;
    cmd::run(Command::new("ip").args(["addr", "add", DUMMY_CIDR, "dev", DUMMY]))?;
    cmd::run(Command::new("ip").args(["link", "set", DUMMY, "up"]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_first_non_loopback_interface() {
        let listing = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n\
                       5: veth1@if4    inet 10.0.0.2/24 scope global veth1\n\
                       4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\n";
        assert_eq!(first_ipv4_netdev_in(listing).as_deref(), Some("veth1"));
        assert_eq!(
            first_ipv4_netdev_in("1: lo    inet 127.0.0.1/8 scope host lo\n"),
            None
        );
        assert_eq!(first_ipv4_netdev_in(""), None);
    }
}
