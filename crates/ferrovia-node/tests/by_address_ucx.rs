//! Connection by address over UCX on the host (tcp; shared memory lanes
//! where UCX picks them): a listener accepting clients in any order, each
//! into a channel of its own, private data both ways (a
//! `RemoteMemoryRegion` in the answer), the scoped API over each
//! connection, and the faults, each a typed error within its deadline
//! naming the address. `device_by_address` runs the same on soft-RoCE.

mod by_address_common;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use by_address_common::{Case, T};
use ferrovia_node::{Backend, ConnectError, Listener};
use ferrovia_ucx::UcxTransport;

fn case() -> Case {
    Case::new(Backend::Ucx, "127.0.0.1".parse().unwrap())
}

#[test]
fn clients_exchange_private_data_and_post_through_the_scoped_api() {
    case().one_client();
}

#[test]
fn endpoints_without_peer_failure_detection_carry_the_data() {
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

/// Threads and open files of this process, from /proc.
fn cost() -> (usize, usize, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir("/proc/self/fd").unwrap().count();
    (field("Threads:") as usize, fds, field("VmRSS:"))
}

/// A real client connects and trades private data.
fn a_real_client_gets_in(listener: &Listener) {
    let addr = listener.local_addr();
    let client = std::thread::spawn(move || {
        ferrovia_node::Connector::new()
            .backend(Backend::Ucx)
            .connect(addr, b"me", T)
    });
    let ch = listener.accept(T).unwrap().accept(b"you", T).unwrap();
    assert_eq!(ch.peer_private_data(), b"me");
    assert_eq!(client.join().unwrap().unwrap().peer_private_data(), b"you");
}

/// Strangers that connect and never send a request hold at most
/// `max_pending` places for at most the handshake timeout (a new one
/// evicts the oldest), and real clients still get in. Nothing is made for
/// them: no UCX worker, no thread.
#[test]
fn strangers_are_bounded_in_number_and_time() {
    let listener = Listener::builder("127.0.0.1:0".parse().unwrap())
        .backend(Backend::Ucx)
        .max_pending(2)
        .handshake_timeout(Duration::from_millis(300))
        .bind()
        .unwrap();
    let addr = listener.local_addr();
    let (threads, _, _) = cost();
    // Five connections that never send a request.
    let strangers: Vec<TcpStream> = (0..5).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let started = Instant::now();
    match listener.accept(Duration::from_millis(800)) {
        Err(ConnectError::Timeout { addr: a, .. }) => assert_eq!(a, addr),
        other => panic!("expected a timeout: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    // Three evicted at once, two dropped after 300 ms.
    assert_eq!(listener.refused(), 5);
    assert!(cost().0 <= threads, "no thread for a stranger");
    drop(strangers);
    a_real_client_gets_in(&listener);
}

/// Issue 22, part 2: 17 zero bytes to a UCX `Listener`'s port aborted the
/// process (UCX's socket connection manager asserted, `offset <= length`,
/// 17 > 16), and so did 4 KiB of zeros and 8 zero bytes followed by u32 or
/// u64 max. Now the front door is ferrovia's: every one of these, UCX's
/// tcp magic number with 4 KiB of 0xff, random bytes, a 4 GiB length
/// prefix, HTTP and a slowloris are refused, the listener keeps its
/// threads, files and memory, and a real client gets in afterwards.
#[test]
fn garbage_at_the_front_door_is_refused_and_the_listener_still_serves() {
    let listener = Listener::builder("127.0.0.1:0".parse().unwrap())
        .backend(Backend::Ucx)
        .max_pending(8)
        .handshake_timeout(Duration::from_millis(500))
        .bind()
        .unwrap();
    let addr = listener.local_addr();
    a_real_client_gets_in(&listener);
    let before = cost();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect()
    };
    let mut garbage: Vec<Vec<u8>> = vec![
        vec![0; 16],
        vec![0; 17],
        vec![0; 4096],
        [vec![0; 8], u32::MAX.to_le_bytes().to_vec()].concat(),
        [vec![0; 8], u64::MAX.to_le_bytes().to_vec()].concat(),
        [
            0xCAFE_BABE_1234_5678u64.to_le_bytes().to_vec(),
            vec![0xff; 4096],
        ]
        .concat(),
        // Our own magic and a 4 GiB length where ours is a u16.
        [b"FVCD\x01\x01".to_vec(), vec![0xff; 6]].concat(),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
    ];
    for n in [1, 8, 100, 1000, 65536] {
        garbage.push(random(n));
    }
    for round in 0..10 {
        let sent: Vec<TcpStream> = garbage
            .iter()
            .map(|g| {
                let mut s = TcpStream::connect(addr).unwrap();
                let _ = s.write_all(g);
                s
            })
            .collect();
        // A slowloris: a valid header, one byte at a time, never done.
        let mut slow = TcpStream::connect(addr).unwrap();
        let _ = slow.write_all(b"FV");
        let r = listener.accept(Duration::from_millis(50 + 10 * round));
        assert!(matches!(r, Err(ConnectError::Timeout { .. })), "{r:?}");
        let _ = slow.write_all(b"C");
        drop(sent);
    }
    // Past the handshake timeout the slow ones are gone too.
    let r = listener.accept(Duration::from_millis(700));
    assert!(matches!(r, Err(ConnectError::Timeout { .. })), "{r:?}");
    let refused = listener.refused();
    println!("refused {refused} connections");
    assert!(refused >= 10 * garbage.len() as u64, "{refused}");
    let after = cost();
    println!("threads, files, RSS KiB: before {before:?}, after {after:?}");
    assert!(after.0 <= before.0, "threads {before:?} -> {after:?}");
    assert!(after.1 <= before.1 + 2, "files {before:?} -> {after:?}");
    assert!(
        after.2 < before.2 + 16 * 1024,
        "RSS {before:?} -> {after:?}"
    );
    a_real_client_gets_in(&listener);
}

/// Issue 22, part 3: a connect where nothing listens is refused at once
/// (it waited out its 5 s deadline over shared memory), and a connection
/// on this host works on shared memory alone (the default for loopback:
/// it timed out "waiting for the server's answer" with `UCX_TLS=sm,self`).
#[test]
fn nothing_listening_is_refused_at_once_and_loopback_needs_no_tcp() {
    let gone = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let started = Instant::now();
    match ferrovia_node::Connector::new()
        .backend(Backend::Ucx)
        .connect(gone, b"", Duration::from_secs(5))
    {
        Err(ConnectError::NotListening { addr, .. }) => assert_eq!(addr, gone),
        other => panic!("expected NotListening: {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    let listener = Listener::builder("127.0.0.1:0".parse().unwrap())
        .backend(Backend::Ucx)
        .bind()
        .unwrap();
    a_real_client_gets_in(&listener);
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
