//! UCX's forms of a socket address: `ucs_sock_addr_t` to name one, and
//! the bindgen `sockaddr_storage` it reports. The layouts themselves are
//! `ferrovia_types::RawSockAddr`'s.

use std::mem::size_of;
use std::net::SocketAddr;

pub(crate) use ferrovia_types::RawSockAddr;

use crate::ffi;

/// The `ucs_sock_addr_t` naming `raw`; it borrows `raw`, which must
/// outlive every use of it (UCX copies the address during the call it is
/// passed to).
pub(crate) fn as_ucs(raw: &RawSockAddr) -> ffi::ucs_sock_addr_t {
    ffi::ucs_sock_addr_t {
        addr: raw.as_ptr().cast(),
        addrlen: raw.len(),
    }
}

/// Reads a socket address UCX filled in (`ucp_listener_attr_t::sockaddr`,
/// `ucp_conn_request_attr_t::client_address`).
pub(crate) fn from_storage(storage: &ffi::sockaddr_storage) -> Option<SocketAddr> {
    const _: () =
        assert!(size_of::<ffi::sockaddr_storage>() == size_of::<libc::sockaddr_storage>());
    // SAFETY: bindgen's `sockaddr_storage` is the C struct libc's names
    // (same size, checked above), a whole initialised value behind a
    // reference; `read_raw` copes with any alignment.
    unsafe { RawSockAddr::read_raw(std::ptr::from_ref(storage).cast()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddrV6;

    #[test]
    fn ucs_addresses_name_the_whole_storage_and_read_back() {
        for addr in [
            "192.168.77.1:7471".parse().unwrap(),
            SocketAddr::V6(SocketAddrV6::new(
                "fe80::84d3:55ff:fe46:439e".parse().unwrap(),
                7174,
                0,
                3,
            )),
        ] {
            let raw = RawSockAddr::new(&addr);
            let ucs = as_ucs(&raw);
            assert_eq!(ucs.addrlen, raw.len());
            // SAFETY: `ucs.addr` points at `raw`'s whole storage, alive
            // for this read.
            let storage: ffi::sockaddr_storage = unsafe { std::ptr::read(ucs.addr.cast()) };
            assert_eq!(from_storage(&storage), Some(addr));
        }
    }
}
