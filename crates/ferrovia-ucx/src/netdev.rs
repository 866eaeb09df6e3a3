//! The host's network devices as UCX names them: the interface that holds
//! an address (`getifaddrs`), and the ports of its RDMA devices (sysfs).

use std::ffi::CStr;
use std::net::IpAddr;

/// The name of the interface holding `ip` (e.g. `eth0`, `lo`), if any.
pub(crate) fn interface_of(ip: IpAddr) -> Option<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the list is freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut at = head;
    while !at.is_null() {
        // SAFETY: a node of the list getifaddrs returned, alive until
        // freeifaddrs.
        let ifa = unsafe { &*at };
        at = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: `ifa_addr` points at a sockaddr of the family it names,
        // as large as that family's sockaddr.
        let addr = unsafe { sockaddr_ip(ifa.ifa_addr) };
        if addr == Some(ip) {
            // SAFETY: a NUL-terminated name of the same node.
            let name = unsafe { CStr::from_ptr(ifa.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
            break;
        }
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(head) };
    found
}

/// The IP address in a socket address of family `AF_INET` or `AF_INET6`.
///
/// # Safety
/// `sa` points at a readable sockaddr as large as its family's.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    // SAFETY: every sockaddr starts with its family (the caller's promise).
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: the family says it is a sockaddr_in (the caller's
            // promise that it is that large).
            let sin = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Some(IpAddr::from(
                u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, a sockaddr_in6.
            let sin6 = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Some(IpAddr::from(sin6.sin6_addr.s6_addr))
        }
        _ => None,
    }
}

/// Every active port of the host's RDMA devices, as UCX names them
/// (`mlx5_0:1`), from `/sys/class/infiniband`.
pub(crate) fn rdma_ports() -> Vec<String> {
    let mut ports = Vec::new();
    let Ok(devices) = std::fs::read_dir("/sys/class/infiniband") else {
        return ports;
    };
    for dev in devices.flatten() {
        let name = dev.file_name().to_string_lossy().into_owned();
        let Ok(dev_ports) = std::fs::read_dir(dev.path().join("ports")) else {
            continue;
        };
        for port in dev_ports.flatten() {
            let number = port.file_name().to_string_lossy().into_owned();
            let state = std::fs::read_to_string(port.path().join("state")).unwrap_or_default();
            if state.contains("ACTIVE") {
                ports.push(format!("{name}:{number}"));
            }
        }
    }
    ports.sort();
    ports
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_found_by_its_address() {
        assert_eq!(
            interface_of(IpAddr::from([127, 0, 0, 1])).as_deref(),
            Some("lo")
        );
        assert_eq!(interface_of(IpAddr::from([192, 0, 2, 77])), None);
    }
}
