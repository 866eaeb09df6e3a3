//! Socket addresses to and from the C `struct sockaddr` forms UCX takes
//! (`ucs_sock_addr_t`) and reports (`struct sockaddr_storage`): IPv4, and
//! IPv6 with its scope id for link-local addresses.

use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::ffi;

/// A socket address laid out as `struct sockaddr_storage`, with the
/// length of the family's struct, for `ucs_sock_addr_t`.
pub(crate) struct RawSockAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl RawSockAddr {
    /// The C form of `addr` (network byte order port and address).
    pub(crate) fn new(addr: &SocketAddr) -> RawSockAddr {
        // SAFETY: sockaddr_storage is plain integers and byte arrays, for
        // which all-zeroes is a valid (unspecified-family) value.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let len = match addr {
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
                size_of::<libc::sockaddr_in>()
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
                size_of::<libc::sockaddr_in6>()
            }
        };
        RawSockAddr {
            storage,
            len: len as libc::socklen_t,
        }
    }

    /// The `ucs_sock_addr_t` naming this address; it borrows `self`, which
    /// must outlive every use of it (UCX copies the address during the
    /// call it is passed to).
    pub(crate) fn as_ucs(&self) -> ffi::ucs_sock_addr_t {
        ffi::ucs_sock_addr_t {
            addr: (&raw const self.storage).cast(),
            addrlen: self.len,
        }
    }
}

/// Reads a socket address UCX filled in (`ucp_listener_attr_t::sockaddr`,
/// `ucp_conn_request_attr_t::client_address`).
pub(crate) fn from_storage(storage: &ffi::sockaddr_storage) -> Option<SocketAddr> {
    const _: () =
        assert!(size_of::<ffi::sockaddr_storage>() == size_of::<libc::sockaddr_storage>());
    let family = i32::from(storage.ss_family);
    let at = std::ptr::from_ref(storage);
    if family == libc::AF_INET {
        const _: () = assert!(size_of::<libc::sockaddr_in>() <= size_of::<ffi::sockaddr_storage>());
        // SAFETY: the family says the storage holds a sockaddr_in, which
        // fits in it (checked above at compile time); an unaligned read
        // copes with any alignment.
        let sin: libc::sockaddr_in = unsafe { std::ptr::read_unaligned(at.cast()) };
        Some(SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
            u16::from_be(sin.sin_port),
        )))
    } else if family == libc::AF_INET6 {
        const _: () =
            assert!(size_of::<libc::sockaddr_in6>() <= size_of::<ffi::sockaddr_storage>());
        // SAFETY: as for IPv4, a sockaddr_in6.
        let sin6: libc::sockaddr_in6 = unsafe { std::ptr::read_unaligned(at.cast()) };
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
        let raw = RawSockAddr::new(&addr);
        let ucs = raw.as_ucs();
        // SAFETY: `ucs.addr` points at `raw.storage`, a whole
        // sockaddr_storage, alive for this read.
        let storage: ffi::sockaddr_storage = unsafe { std::ptr::read(ucs.addr.cast()) };
        from_storage(&storage)
    }

    #[test]
    fn addresses_round_trip_in_network_byte_order() {
        let v4: SocketAddr = "192.168.77.1:7471".parse().unwrap();
        assert_eq!(round_trip(v4), Some(v4));
        assert_eq!(
            RawSockAddr::new(&v4).as_ucs().addrlen as usize,
            size_of::<libc::sockaddr_in>()
        );
        let v6 = SocketAddr::V6(SocketAddrV6::new(
            "fe80::84d3:55ff:fe46:439e".parse().unwrap(),
            7174,
            0,
            3,
        ));
        assert_eq!(round_trip(v6), Some(v6));
        assert_eq!(
            RawSockAddr::new(&v6).as_ucs().addrlen as usize,
            size_of::<libc::sockaddr_in6>()
        );
    }
}
