//! Socket addresses to and from the C `struct sockaddr_storage` form that
//! both connection layers take and report (librdmacm on verbs, UCX's
//! listeners): IPv4, and IPv6 with its flow info and scope id (link-local
//! addresses need the scope).
#![allow(unsafe_code)] // C struct layouts: each block argues its own case

use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// A socket address laid out as `struct sockaddr_storage`, with the
/// length of its family's struct.
#[derive(Clone, Copy)]
pub struct RawSockAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl RawSockAddr {
    /// The C form of `addr` (port and address in network byte order).
    pub fn new(addr: &SocketAddr) -> RawSockAddr {
        let mut storage = zeroed_storage();
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
                // only its first bytes.
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

    /// The whole `sockaddr_storage`; C reads it through a
    /// `struct sockaddr *` cast of this pointer.
    pub fn as_ptr(&self) -> *const libc::sockaddr_storage {
        &raw const self.storage
    }

    /// The length of the family's struct (`sockaddr_in` or `sockaddr_in6`).
    pub fn len(&self) -> libc::socklen_t {
        self.len
    }

    /// Never: a `RawSockAddr` always holds an address (for clippy's
    /// `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The address C filled into `storage`; `None` for a family other
    /// than IPv4 and IPv6.
    pub fn read(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
        let family = i32::from(storage.ss_family);
        let at = std::ptr::from_ref(storage);
        if family == libc::AF_INET {
            const _: () =
                assert!(size_of::<libc::sockaddr_in>() <= size_of::<libc::sockaddr_storage>());
            // SAFETY: the family says the storage holds a sockaddr_in,
            // which fits in it (checked at compile time); an unaligned
            // read copes with any alignment.
            let sin: libc::sockaddr_in = unsafe { std::ptr::read_unaligned(at.cast()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        } else if family == libc::AF_INET6 {
            const _: () =
                assert!(size_of::<libc::sockaddr_in6>() <= size_of::<libc::sockaddr_storage>());
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

    /// Reads the `sockaddr_storage` at `at`, which C filled in (a field of
    /// a C struct, maybe unaligned).
    ///
    /// # Safety
    /// `at` must point to `size_of::<libc::sockaddr_storage>()` readable
    /// bytes that hold no uninitialised padding the family's struct uses
    /// (C zeroes or fills the whole storage).
    pub unsafe fn read_raw(at: *const libc::sockaddr_storage) -> Option<SocketAddr> {
        // SAFETY: our caller guarantees a whole, initialised storage is
        // readable there; an unaligned read copes with any alignment.
        let storage = unsafe { std::ptr::read_unaligned(at) };
        RawSockAddr::read(&storage)
    }
}

impl std::fmt::Debug for RawSockAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match RawSockAddr::read(&self.storage) {
            Some(addr) => write!(f, "RawSockAddr({addr})"),
            None => f.write_str("RawSockAddr(?)"),
        }
    }
}

fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain integers and byte arrays, for which
    // all-zeroes is a valid (unspecified-family) value.
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_in_network_byte_order() {
        let v4: SocketAddr = "192.168.77.1:7471".parse().unwrap();
        let raw = RawSockAddr::new(&v4);
        assert_eq!(RawSockAddr::read(&raw.storage), Some(v4));
        assert_eq!(raw.len() as usize, size_of::<libc::sockaddr_in>());
        // SAFETY: the storage was written as a sockaddr_in just above.
        let sin: libc::sockaddr_in = unsafe { std::ptr::read(raw.as_ptr().cast()) };
        // 7471 = 0x1d2f, big-endian on the wire.
        assert_eq!(sin.sin_port.to_ne_bytes(), [0x1d, 0x2f]);
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [192, 168, 77, 1]);

        let v6 = SocketAddr::V6(SocketAddrV6::new(
            "fe80::84d3:55ff:fe46:439e".parse().unwrap(),
            18515,
            7,
            3,
        ));
        let raw = RawSockAddr::new(&v6);
        assert_eq!(raw.len() as usize, size_of::<libc::sockaddr_in6>());
        // SAFETY: `raw.as_ptr()` is a whole, initialised storage.
        assert_eq!(unsafe { RawSockAddr::read_raw(raw.as_ptr()) }, Some(v6));
    }

    #[test]
    fn other_families_are_none() {
        let mut storage = zeroed_storage();
        storage.ss_family = libc::AF_UNIX as libc::sa_family_t;
        assert_eq!(RawSockAddr::read(&storage), None);
    }
}
