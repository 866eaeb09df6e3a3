//! Connection by address over verbs (the RDMA connection manager) on
//! soft-RoCE: the scenarios `by_address_ucx` runs on UCX, on the device's
//! IPv4 address (`SOFTROCE_IP`, which `cargo xtask vm` sets) and on its
//! IPv6 link-local address.

mod by_address_common;

use std::net::{IpAddr, SocketAddr};

use by_address_common::Case;
use ferrovia_node::Backend;

/// The soft-RoCE device's IPv4 address; fails (never skips) without it.
fn device_ip() -> IpAddr {
    let ip = std::env::var("SOFTROCE_IP")
        .expect("SOFTROCE_IP is not set: run the device tests with cargo xtask test (or vm)");
    ip.parse().expect("SOFTROCE_IP is an IP address")
}

fn case() -> Case {
    Case::new(Backend::Verbs, device_ip())
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn clients_exchange_private_data_and_post_through_the_scoped_api() {
    case().one_client();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn many_clients_are_accepted_in_any_order_each_into_its_own_channel() {
    case().many_clients(5);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn private_data_limits_are_the_same_on_both_backends() {
    case().private_data_limits();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn nothing_listening_rejected_and_port_in_use_are_typed_errors() {
    case().refusals();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn an_address_on_no_rdma_device_is_unreachable() {
    // Loopback has no RDMA device: the address does not resolve to one.
    case().unreachable(SocketAddr::new("127.0.0.1".parse().unwrap(), 7471));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_peer_that_disconnects_fails_pending_work_naming_its_address() {
    case().disconnect_fails_pending_work();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn accept_waits_no_longer_than_its_deadline() {
    case().accept_deadline();
}

/// The soft-RoCE netdev's link-local IPv6 address and its interface
/// index, from `/proc/net/if_inet6`.
fn link_local() -> (std::net::Ipv6Addr, u32) {
    let netdev = std::env::var("SOFTROCE_NETDEV").expect("SOFTROCE_NETDEV is not set");
    let table = std::fs::read_to_string("/proc/net/if_inet6").unwrap();
    table
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Scope 20: link.
            (f.len() == 6 && f[3] == "20" && f[5] == netdev).then(|| {
                (
                    u128::from_str_radix(f[0], 16).unwrap().into(),
                    u32::from_str_radix(f[1], 16).unwrap(),
                )
            })
        })
        .unwrap_or_else(|| panic!("{netdev} has no link-local IPv6 address"))
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ipv6_link_local_works_too() {
    let (ip, scope) = link_local();
    let mut c = Case::new(Backend::Verbs, ip.into());
    c.scope = scope;
    c.one_client();
}
