//! Device tests of the connection manager (`ferrovia_verbs::cm`): connect
//! by address on a real (soft-)RoCE device. Run by `cargo xtask test`;
//! ignored under plain `cargo test`.

mod common;

use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::thread;
use std::time::{Duration, Instant};

use common::{Buf, WAIT, ok, pattern};
use ferrovia_verbs::cm::{
    ACCEPT_PRIVATE_DATA_MAX, CONNECT_PRIVATE_DATA_MAX, CmConnection, CmConnector, CmError,
    CmEventType, CmListener, REJECT_PRIVATE_DATA_MAX, RejectReason, cm_connect,
};
use ferrovia_verbs::{
    AccessFlags, CompletionQueue, ProtectionDomain, QueuePair, RecvWr, SendWr, WcStatus,
};

fn any_port() -> SocketAddr {
    SocketAddr::new(common::ipv4(), 0)
}

/// Client private data: 56 bytes, a recognisable pattern.
fn hello(seed: u8) -> Vec<u8> {
    pattern(CONNECT_PRIVATE_DATA_MAX, seed)
}

/// Sends `bytes` from `from` to `to` (a receive posted first) and checks
/// they arrived.
fn send_recv(from: &CmConnection, to: &CmConnection, bytes: &[u8]) {
    let mut src = Buf::new(from.pd(), bytes.len(), AccessFlags::NONE);
    src.data.copy_from_slice(bytes);
    let dst = Buf::new(to.pd(), bytes.len(), AccessFlags::LOCAL_WRITE);
    let (rs, ss) = ([dst.sge(0, bytes.len())], [src.sge(0, bytes.len())]);
    // SAFETY: registered buffers, untouched until the completions below.
    unsafe {
        to.qp().post_recv(&mut RecvWr::new(1, &rs)).unwrap();
        from.qp().post_send(&mut SendWr::send(2, &ss)).unwrap();
    }
    ok(from.cq(), 2);
    let wc = ok(to.cq(), 1);
    assert_eq!(wc.byte_len() as usize, bytes.len());
    assert_eq!(dst.data, bytes);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn connect_accept_with_private_data_both_ways_then_send_and_write() {
    let listener = CmListener::bind(any_port()).unwrap();
    let addr = listener.local_addr();
    assert_ne!(addr.port(), 0, "port 0 must be replaced by the bound port");
    let client = thread::spawn(move || cm_connect(addr, &hello(1), WAIT));

    let request = listener.accept(WAIT).unwrap();
    assert_eq!(request.private_data(), &hello(1)[..]);
    assert_eq!(request.peer_addr().ip(), addr.ip());
    // The server's answer: an RDMA-writable buffer's address and rkey,
    // then a pattern up to the accept's limit.
    let res = request.create_resources().unwrap();
    let inbox = Buf::new(
        &res.pd,
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let mut answer = Vec::new();
    answer.extend_from_slice(&inbox.addr().to_be_bytes());
    answer.extend_from_slice(&inbox.mr.rkey().to_be_bytes());
    answer.extend_from_slice(&pattern(ACCEPT_PRIVATE_DATA_MAX - 12, 2));
    let server = request.accept_with(res, &answer, WAIT).unwrap();
    let client = client.join().unwrap().unwrap();
    assert_eq!(client.private_data(), &answer[..]);
    assert_eq!(client.peer_addr(), addr);
    assert_eq!(server.link().local_addr(), addr);
    assert_eq!(server.peer_addr(), client.link().local_addr());

    // Send/receive both ways over the connected QPs.
    send_recv(&client, &server, &pattern(1000, 3));
    send_recv(&server, &client, &pattern(333, 4));

    // An RDMA write into the buffer the accept advertised.
    let remote = u64::from_be_bytes(client.private_data()[..8].try_into().unwrap());
    let rkey = u32::from_be_bytes(client.private_data()[8..12].try_into().unwrap());
    let mut src = Buf::new(client.pd(), 4096, AccessFlags::NONE);
    src.data.copy_from_slice(&pattern(4096, 5));
    let ss = [src.sge(0, 4096)];
    // SAFETY: registered source, untouched until its completion; the
    // target is the server's registered, remote-writable inbox.
    unsafe {
        client
            .qp()
            .post_send(&mut SendWr::write(7, &ss, remote, rkey))
            .unwrap();
    }
    ok(client.cq(), 7);
    assert_eq!(inbox.data, pattern(4096, 5));
}

/// A port nothing listens on (bound once, then released).
fn unused_port() -> SocketAddr {
    let l = CmListener::bind(any_port()).unwrap();
    l.local_addr()
}

/// Asserts `e` names `addr` in its field and its message.
fn names(e: &CmError, addr: SocketAddr) {
    assert_eq!(e.addr(), Some(addr), "{e:?}");
    assert!(e.to_string().contains(&addr.to_string()), "{e}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn one_listener_accepts_three_clients_in_any_order_while_a_fourth_vanishes() {
    let listener = CmListener::bind(any_port()).unwrap();
    let addr = listener.local_addr();
    // Clients 0..3 arrive in the order 1, vanisher, 2, 0.
    let delays = [300u64, 0, 150];
    let clients: Vec<_> = (0..3u8)
        .map(|i| {
            let delay = Duration::from_millis(delays[usize::from(i)]);
            thread::spawn(move || {
                thread::sleep(delay);
                cm_connect(addr, &[b'c', i], WAIT)
            })
        })
        .collect();
    // The fourth sends its request, then gives up before any answer and
    // destroys its id, as a process that dies does.
    let vanisher = thread::spawn(move || {
        thread::sleep(Duration::from_millis(60));
        let resolved = CmConnector::new(addr).resolve(WAIT).unwrap();
        let res = resolved.create_resources().unwrap();
        let started = Instant::now();
        let e = resolved
            .connect(res, b"vanish", Duration::from_millis(1))
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        e
    });

    let deadline = Instant::now() + WAIT * 2;
    let mut accepted: Vec<(u8, CmConnection)> = Vec::new();
    let mut vanished = None;
    while accepted.len() < 3 || vanished.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let request = listener.accept(left).unwrap();
        let data = request.private_data().to_vec();
        match request.accept(&[b's', data[1]], WAIT) {
            Ok(conn) => {
                assert_eq!(data[0], b'c', "only the three clients get through");
                accepted.push((data[1], conn));
            }
            Err(e) => {
                assert!(data.starts_with(b"vanish"), "a real client failed: {e}");
                names(&e, request_peer(&e));
                vanished = Some(e);
            }
        }
    }
    let vanish_err = vanisher.join().unwrap();
    assert!(
        matches!(vanish_err, CmError::Timeout { .. }),
        "{vanish_err:?}"
    );
    names(&vanish_err, addr);
    let server_err = vanished.unwrap();
    eprintln!("vanished client: client side {vanish_err}; server side {server_err}");
    assert!(server_err.is_peer_failure(), "{server_err:?}");

    // The listener goes; the connections stay.
    drop(listener);
    let mut ids: Vec<u8> = accepted.iter().map(|(i, _)| *i).collect();
    ids.sort_unstable();
    assert_eq!(ids, [0, 1, 2]);
    let clients: Vec<CmConnection> = clients
        .into_iter()
        .map(|c| c.join().unwrap().unwrap())
        .collect();
    for (i, client) in clients.iter().enumerate() {
        assert_eq!(&client.private_data()[..2], &[b's', i as u8]);
        let (_, server) = accepted.iter().find(|(j, _)| usize::from(*j) == i).unwrap();
        send_recv(server, client, &pattern(100 + i, i as u8));
        send_recv(client, server, &pattern(200 + i, i as u8));
    }
}

/// The peer address an accept error names.
fn request_peer(e: &CmError) -> SocketAddr {
    e.addr().expect("accept errors name the client")
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn nothing_listening_is_a_typed_error_naming_the_address() {
    let addr = unused_port();
    let started = Instant::now();
    let e = cm_connect(addr, b"anyone?", WAIT).unwrap_err();
    assert!(matches!(e, CmError::NotListening { .. }), "{e:?}");
    names(&e, addr);
    assert!(started.elapsed() < WAIT);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_rejection_carries_the_servers_private_data() {
    let listener = CmListener::bind(any_port()).unwrap();
    let addr = listener.local_addr();
    let client = thread::spawn(move || cm_connect(addr, b"let me in", WAIT));
    let request = listener.accept(WAIT).unwrap();
    assert!(request.private_data().starts_with(b"let me in"));
    let why = pattern(REJECT_PRIVATE_DATA_MAX, 9);
    request.reject(&why).unwrap();
    match client.join().unwrap().unwrap_err() {
        CmError::Rejected {
            addr: a,
            reason,
            private_data,
        } => {
            assert_eq!(a, addr);
            assert_eq!(reason, RejectReason::CONSUMER_DEFINED);
            assert_eq!(private_data, why);
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn unroutable_addresses_fail_resolution_naming_the_address() {
    // No route at all, and a route through a netdev without RDMA (lo).
    for addr in ["10.255.255.1:7000", "127.0.0.1:7000"] {
        let addr: SocketAddr = addr.parse().unwrap();
        let started = Instant::now();
        let e = cm_connect(addr, b"", WAIT).unwrap_err();
        assert!(
            matches!(
                e,
                CmError::AddressResolution { .. } | CmError::RouteResolution { .. }
            ),
            "{addr}: {e:?}"
        );
        names(&e, addr);
        assert!(started.elapsed() < WAIT, "{addr}: {:?}", started.elapsed());
        eprintln!("{addr}: {e}");
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_silent_host_times_out_within_the_deadline() {
    // On the device's subnet, but nobody is there: the request goes
    // unanswered (the CM would retry for a minute before UNREACHABLE).
    let IpAddr::V4(mine) = common::ipv4() else {
        unreachable!()
    };
    let [a, b, c, d] = mine.octets();
    let silent = SocketAddr::new(IpAddr::from([a, b, c, d.wrapping_add(98)]), 7000);
    let timeout = Duration::from_secs(3);
    let started = Instant::now();
    let e = cm_connect(silent, b"hello?", timeout).unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(
            e,
            CmError::Timeout { .. }
                | CmError::Unreachable { .. }
                | CmError::AddressResolution { .. }
        ),
        "{e:?}"
    );
    names(&e, silent);
    assert!(took < timeout + Duration::from_secs(1), "took {took:?}");
    eprintln!("{silent}: {e}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_port_in_use_is_a_typed_error() {
    let first = CmListener::bind(any_port()).unwrap();
    let addr = first.local_addr();
    let e = CmListener::bind(addr).unwrap_err();
    assert!(matches!(e, CmError::AddrInUse { .. }), "{e:?}");
    names(&e, addr);
    // Free again once the first listener is gone.
    drop(first);
    let again = CmListener::bind(addr).unwrap();
    assert_eq!(again.local_addr(), addr);
}

/// A client and the server's side of its connection.
fn connected_pair() -> (CmConnection, CmConnection) {
    let listener = CmListener::bind(any_port()).unwrap();
    let addr = listener.local_addr();
    let client = thread::spawn(move || cm_connect(addr, b"pair", WAIT));
    let server = listener.accept(WAIT).unwrap().accept(b"ok", WAIT).unwrap();
    (client.join().unwrap().unwrap(), server)
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_peer_disconnect_is_reported_and_pending_work_is_flushed() {
    let (client, server) = connected_pair();
    let buf = Buf::new(client.pd(), 64, AccessFlags::LOCAL_WRITE);
    let rs = [buf.sge(0, 64)];
    // SAFETY: registered, untouched until its (flush) completion.
    unsafe { client.qp().post_recv(&mut RecvWr::new(5, &rs)).unwrap() };
    assert!(client.link().poll_event().unwrap().is_none());

    server.disconnect().unwrap();
    let ev = client.link().wait_event(WAIT).unwrap();
    assert_eq!(ev.event_type(), CmEventType::DISCONNECTED);
    assert!(client.link().is_disconnected());
    // What the channel layer does on that event: flush the QP.
    client.qp().to_error().unwrap();
    let wc = common::one(client.cq());
    assert_eq!(wc.wr_id(), 5);
    assert_eq!(wc.status(), WcStatus::WR_FLUSH_ERR);
    server.link().wait_disconnected(WAIT).unwrap();

    // Dropping a connection disconnects it too.
    let (client, server) = connected_pair();
    drop(client);
    server.link().wait_disconnected(WAIT).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn oversized_private_data_fails_before_anything_is_sent() {
    let listener = CmListener::bind(any_port()).unwrap();
    let addr = listener.local_addr();
    let e = cm_connect(addr, &[0; CONNECT_PRIVATE_DATA_MAX + 1], WAIT).unwrap_err();
    assert!(
        matches!(
            e,
            CmError::PrivateDataTooLong {
                len: 57,
                max: 56,
                ..
            }
        ),
        "{e:?}"
    );
    names(&e, addr);
    // Nothing reached the listener.
    let quiet = listener.accept(Duration::from_millis(500)).unwrap_err();
    assert!(matches!(quiet, CmError::Timeout { .. }), "{quiet:?}");

    // Too long an answer or rejection fails on the server, typed.
    let client = thread::spawn(move || cm_connect(addr, b"x", WAIT));
    let request = listener.accept(WAIT).unwrap();
    let peer = request.peer_addr();
    let e = request
        .accept(&[0; ACCEPT_PRIVATE_DATA_MAX + 1], WAIT)
        .unwrap_err();
    assert!(
        matches!(
            e,
            CmError::PrivateDataTooLong {
                len: 197,
                max: 196,
                ..
            }
        ),
        "{e:?}"
    );
    names(&e, peer);
    // The dropped request was rejected.
    let e = client.join().unwrap().unwrap_err();
    assert!(matches!(e, CmError::Rejected { .. }), "{e:?}");

    let client = thread::spawn(move || cm_connect(addr, b"y", WAIT));
    let request = listener.accept(WAIT).unwrap();
    let e = request
        .reject(&[0; REJECT_PRIVATE_DATA_MAX + 1])
        .unwrap_err();
    assert!(
        matches!(
            e,
            CmError::PrivateDataTooLong {
                len: 149,
                max: 148,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(client.join().unwrap().is_err());
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn own_queue_pairs_in_one_pd_and_cq_as_a_channel_would() {
    let ctx = common::device();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let cq = CompletionQueue::with_channel(&ctx, 64).unwrap();
    let port = ctx.active_port().unwrap().port;
    let new_qp = || {
        QueuePair::builder(&pd, &cq, &cq)
            .port(port)
            .build()
            .unwrap()
    };
    let (server_qp, client_qp) = (new_qp(), new_qp());

    let listener = CmListener::builder(any_port()).pd(&pd).bind().unwrap();
    let addr = listener.local_addr();
    let resolved = CmConnector::new(addr).pd(&pd).resolve(WAIT).unwrap();
    assert_eq!(resolved.device_name(), ctx.name());
    // The client's QP in INIT takes a receive before connecting.
    resolved.ready_qp(&client_qp).unwrap();
    let inbox = Buf::new(&pd, 64, AccessFlags::LOCAL_WRITE);
    let rs = [inbox.sge(0, 64)];
    // SAFETY: registered, untouched until its completion.
    unsafe { client_qp.post_recv(&mut RecvWr::new(11, &rs)).unwrap() };

    let client = thread::scope(|s| {
        let client = s.spawn(|| resolved.connect_qp(&client_qp, b"own", WAIT));
        let request = listener.accept(WAIT).unwrap();
        // The server's QP reaches RTS before accepting and sends at once.
        request.ready_qp(&server_qp).unwrap();
        let link = request.accept_qp(&server_qp, b"own too", WAIT).unwrap();
        assert!(link.private_data().starts_with(b"own"));
        let mut out = Buf::new(&pd, 64, AccessFlags::NONE);
        out.data.copy_from_slice(&pattern(64, 12));
        let ss = [out.sge(0, 64)];
        // SAFETY: registered, untouched until its completion.
        unsafe { server_qp.post_send(&mut SendWr::send(12, &ss)).unwrap() };
        let mut seen = [false; 2];
        for _ in 0..2 {
            let wc = common::one(&cq);
            wc.result().unwrap();
            seen[usize::from(wc.wr_id() == 12)] = true;
        }
        assert_eq!(seen, [true, true]);
        (client.join().unwrap().unwrap(), link)
    });
    assert!(client.0.private_data().starts_with(b"own too"));
    assert_eq!(inbox.data, pattern(64, 12));
    // Drop order is free: links first here, then the QPs, CQ and PD.
    drop(client);
    drop(server_qp);
    drop(client_qp);
}

/// The device's link-local IPv6 address with its scope (the netdev's
/// index), if its GID table has one.
fn ipv6_link_local() -> Option<SocketAddr> {
    let ctx = common::device();
    let port = ctx.active_port().unwrap().port;
    let gid = ctx
        .gid_table(port)
        .unwrap()
        .into_iter()
        .find(|g| g.gid.is_link_local())?;
    let ndev = std::fs::read_to_string(format!(
        "/sys/class/infiniband/{}/ports/{port}/gid_attrs/ndevs/{}",
        ctx.name(),
        gid.index
    ))
    .ok()?;
    let name = std::ffi::CString::new(ndev.trim()).unwrap();
    // SAFETY: a NUL-terminated interface name.
    let scope = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert_ne!(scope, 0, "no interface {ndev:?}");
    Some(SocketAddr::V6(SocketAddrV6::new(
        gid.gid.0.into(),
        0,
        0,
        scope,
    )))
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn ipv6_link_local_with_its_scope_id() {
    let Some(bind) = ipv6_link_local() else {
        panic!("the device has no link-local IPv6 GID (is IPv6 enabled on its netdev?)");
    };
    let listener = CmListener::bind(bind).unwrap();
    let addr = listener.local_addr();
    assert!(addr.is_ipv6() && addr.port() != 0, "{addr}");
    let client = thread::spawn(move || cm_connect(addr, b"v6", WAIT));
    let request = listener.accept(WAIT).unwrap();
    assert!(request.peer_addr().is_ipv6(), "{}", request.peer_addr());
    let server = request.accept(b"v6 ok", WAIT).unwrap();
    let client = client.join().unwrap().unwrap();
    assert!(client.private_data().starts_with(b"v6 ok"));
    send_recv(&client, &server, &pattern(512, 6));
    send_recv(&server, &client, &pattern(512, 7));
}
