//! librdmacm's forms of a socket address: a `struct sockaddr *` to name
//! one, and the `sockaddr_storage`-sized members of `struct rdma_addr` it
//! reports. The layouts themselves are `ferrovia_types::RawSockAddr`'s.

use std::net::SocketAddr;

pub(crate) use ferrovia_types::RawSockAddr;

use ferrovia_sys as sys;

/// A pointer to `raw` for librdmacm calls; they only read the address
/// (their prototypes are not `const`), so the pointer never writes
/// through a shared borrow.
pub(crate) fn sockaddr_ptr(raw: &RawSockAddr) -> *mut sys::sockaddr {
    raw.as_ptr().cast_mut().cast()
}

/// Reads a socket address librdmacm filled in.
///
/// # Safety
/// `sa` must point to readable, initialised memory of at least
/// `size_of::<sockaddr_storage>()` bytes (an address field of a
/// `struct rdma_addr`, which is a union with `sockaddr_storage`).
pub(crate) unsafe fn read_sockaddr(sa: *const sys::sockaddr) -> Option<SocketAddr> {
    // SAFETY: our caller's guarantee is `read_raw`'s.
    unsafe { RawSockAddr::read_raw(sa.cast()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddrV6;

    #[test]
    fn a_named_address_reads_back() {
        for addr in [
            "192.168.77.1:7471".parse().unwrap(),
            SocketAddr::V6(SocketAddrV6::new(
                "fe80::84d3:55ff:fe46:439e".parse().unwrap(),
                18515,
                0,
                3,
            )),
        ] {
            let raw = RawSockAddr::new(&addr);
            // SAFETY: the pointer names `raw`'s whole storage.
            assert_eq!(unsafe { read_sockaddr(sockaddr_ptr(&raw)) }, Some(addr));
        }
    }
}
