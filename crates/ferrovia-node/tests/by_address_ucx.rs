//! Connection by address over UCX on the host (tcp; shared memory lanes
//! where UCX picks them): a listener accepting clients in any order, each
//! into a channel of its own, private data both ways (a
//! `RemoteMemoryRegion` in the answer), the scoped API over each
//! connection, and the faults, each a typed error within its deadline
//! naming the address. `device_by_address` runs the same on soft-RoCE.

mod by_address_common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use by_address_common::{Case, T};
use ferrovia_node::{Backend, ConnectError, Listener};
use ferrovia_ucx::{UcxContext, UcxTransport};

fn case() -> Case {
    Case::new(Backend::Ucx, "127.0.0.1".parse().unwrap())
}

#[test]
fn clients_exchange_private_data_and_post_through_the_scoped_api() {
    case().one_client();
}

#[test]
fn shared_memory_lanes_carry_the_data_without_peer_failure_detection() {
    // UCX 1.13 picks shared memory lanes on one host only for endpoints
    // without peer error handling; the connection manager is tcp's.
    let mut c = case();
    c.ucx = Some(UcxTransport::builder().detect_peer_failure(false));
    c.one_client();
}

#[test]
fn many_clients_are_accepted_in_any_order_each_into_its_own_channel() {
    case().many_clients(5);
}

#[test]
fn private_data_limits_are_the_same_on_both_backends() {
    case().private_data_limits();
}

#[test]
fn nothing_listening_rejected_and_port_in_use_are_typed_errors() {
    case().refusals();
}

#[test]
fn an_unroutable_address_is_a_typed_error() {
    // A multicast address: TCP cannot connect there (ENETUNREACH).
    case().unreachable("224.0.0.1:7471".parse().unwrap());
}

#[test]
fn a_peer_that_disconnects_fails_pending_work_naming_its_address() {
    case().disconnect_fails_pending_work();
}

#[test]
fn accept_waits_no_longer_than_its_deadline() {
    case().accept_deadline();
}

#[test]
fn ipv6_works_too() {
    let Some(ip) = by_address_common::global_ipv6() else {
        eprintln!("this host has no global IPv6 address (UCX 1.13 cannot connect over ::1)");
        return;
    };
    Case::new(Backend::Ucx, ip.into()).one_client();
}

/// Strangers that connect and never send a request, or flood the
/// listener, hold at most `max_pending` handshakes (each a UCX worker and
/// thread) for at most the handshake timeout, and real clients still get
/// in.
#[test]
fn strangers_are_bounded_in_number_and_time() {
    let listener = Listener::builder("127.0.0.1:0".parse().unwrap())
        .backend(Backend::Ucx)
        .max_pending(2)
        .handshake_timeout(Duration::from_millis(300))
        .bind()
        .unwrap();
    let addr = listener.local_addr();
    let ctx = UcxContext::new().unwrap();
    // Five endpoints that never send a request.
    let strangers: Vec<UcxTransport> = (0..5)
        .map(|_| UcxTransport::builder().connect_to(&ctx, addr).unwrap())
        .collect();
    let started = Instant::now();
    match listener.accept(Duration::from_millis(800)) {
        Err(ConnectError::Timeout { addr: a, .. }) => assert_eq!(a, addr),
        other => panic!("expected a timeout: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    // Three were turned away at once, two dropped after 300 ms.
    assert_eq!(listener.refused(), 5);
    let turned_away = strangers
        .iter()
        .filter(|t| t.peer_failure().is_some())
        .count();
    assert!(turned_away >= 3, "{turned_away}");
    drop(strangers);
    // A real client still gets in.
    let client = std::thread::spawn(move || {
        ferrovia_node::Connector::new()
            .backend(Backend::Ucx)
            .connect(addr, b"me", T)
    });
    let ch = listener.accept(T).unwrap().accept(b"you", T).unwrap();
    assert_eq!(ch.peer_private_data(), b"me");
    assert_eq!(client.join().unwrap().unwrap().peer_private_data(), b"you");
}

#[test]
fn the_addresses_in_errors_are_the_ones_asked_for() {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let e = ferrovia_node::Connector::new()
        .backend(Backend::Ucx)
        .connect(addr, b"", T)
        .unwrap_err();
    assert_eq!(e.addr(), addr);
    assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
}
