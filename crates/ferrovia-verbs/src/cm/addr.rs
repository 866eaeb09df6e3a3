//! Socket addresses to and from the C `struct sockaddr` forms librdmacm
//! takes and reports (IPv4, and IPv6 with its scope id for link-local
//! addresses).

use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use ferrovia_sys as sys;

/// A socket address laid out as `struct sockaddr_storage`, for calls that
/// take a `struct sockaddr *`.
pub(crate) struct RawSockAddr(libc::sockaddr_storage);

impl RawSockAddr {
    /// The C form of `addr` (network byte order port and address).
    pub(crate) fn new(addr: &SocketAddr) -> RawSockAddr {
        // SAFETY: sockaddr_storage is plain integers and byte arrays, for
        // which all-zeroes is a valid (unspecified-family) value.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for
                // every sockaddr_* type (its purpose); the write covers
                // only the struct's first bytes.
                unsafe { std::ptr::write((&raw mut storage).cast(), sin) };
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as for IPv4.
                unsafe { std::ptr::write((&raw mut storage).cast(), sin6) };
            }
        }
        RawSockAddr(storage)
    }

    /// A pointer for librdmacm calls; they read the address only (the
    /// prototypes are not `const`).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut sys::sockaddr {
        (&raw mut self.0).cast()
    }
}

/// Reads a socket address librdmacm filled in.
///
/// # Safety
/// `sa` must point to readable memory of at least
/// `size_of::<sockaddr_storage>()` bytes (an address field of a
/// `struct rdma_addr`, which is a union with `sockaddr_storage`).
pub(crate) unsafe fn read_sockaddr(sa: *const sys::sockaddr) -> Option<SocketAddr> {
    // SAFETY: our caller guarantees a whole sockaddr_storage is readable
    // there; an unaligned read copes with any alignment.
    let storage: libc::sockaddr_storage = unsafe { std::ptr::read_unaligned(sa.cast()) };
    let family = i32::from(storage.ss_family);
    if family == libc::AF_INET {
        const _: () =
            assert!(size_of::<libc::sockaddr_in>() <= size_of::<libc::sockaddr_storage>());
        // SAFETY: the family says the storage holds a sockaddr_in, which
        // fits in it (checked above at compile time).
        let sin: libc::sockaddr_in =
            unsafe { std::ptr::read_unaligned((&raw const storage).cast()) };
        Some(SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
            u16::from_be(sin.sin_port),
        )))
    } else if family == libc::AF_INET6 {
        const _: () =
            assert!(size_of::<libc::sockaddr_in6>() <= size_of::<libc::sockaddr_storage>());
        // SAFETY: as for IPv4, a sockaddr_in6.
        let sin6: libc::sockaddr_in6 =
            unsafe { std::ptr::read_unaligned((&raw const storage).cast()) };
        Some(SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(sin6.sin6_addr.s6_addr),
            u16::from_be(sin6.sin6_port),
            u32::from_be(sin6.sin6_flowinfo),
            sin6.sin6_scope_id,
        )))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(addr: SocketAddr) -> Option<SocketAddr> {
        let mut raw = RawSockAddr::new(&addr);
        // SAFETY: `raw` is a whole sockaddr_storage.
        unsafe { read_sockaddr(raw.as_mut_ptr()) }
    }

    #[test]
    fn addresses_round_trip_in_network_byte_order() {
        let v4: SocketAddr = "192.168.77.1:7471".parse().unwrap();
        assert_eq!(round_trip(v4), Some(v4));
        let raw = RawSockAddr::new(&v4);
        // The port is big-endian on the wire form: 7471 = 0x1d2f.
        // SAFETY: the storage was written as a sockaddr_in just above.
        let sin: libc::sockaddr_in = unsafe { std::ptr::read((&raw const raw.0).cast()) };
        assert_eq!(sin.sin_port.to_ne_bytes(), [0x1d, 0x2f]);
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [192, 168, 77, 1]);

        let v6 = SocketAddr::V6(SocketAddrV6::new(
            "fe80::84d3:55ff:fe46:439e".parse().unwrap(),
            7174,
            0,
            3,
        ));
        assert_eq!(round_trip(v6), Some(v6));
    }
}
