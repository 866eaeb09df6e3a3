//! Transports connected by socket address on the host: a listener, clients
//! connecting to it, handshake messages both ways, then the channel API
//! over each connection; and the faults (nothing listening, a rejected
//! request, a port in use, a peer that goes away).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrovia_channel::{
    Channel, ChannelConfig, Gather, ReceiveWorkRequest, Scatter, TransportError,
};
use ferrovia_mr::{MrRegistry, RegisterOptions};
use ferrovia_ucx::{
    EndpointFailure, UcxContext, UcxError, UcxListener, UcxTransport, UcxTransportBuilder,
};

const WAIT: Duration = Duration::from_secs(10);

fn ctx(tls: &str) -> UcxContext {
    UcxContext::with_options(&[("TLS", tls)]).expect("ucp_init")
}

/// One of this host's global IPv6 addresses (UCX 1.13 cannot connect by
/// address over `::1`), from `/proc/net/if_inet6`.
fn global_ipv6() -> Option<std::net::Ipv6Addr> {
    let table = std::fs::read_to_string("/proc/net/if_inet6").ok()?;
    table.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // Scope 00: global.
        if f.len() < 6 || f[3] != "00" {
            return None;
        }
        u128::from_str_radix(f[0], 16)
            .ok()
            .map(std::net::Ipv6Addr::from)
    })
}

/// Waits for the next handshake message of `t`, or its endpoint's failure.
fn handshake(t: &UcxTransport) -> Result<Vec<u8>, EndpointFailure> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(m) = t.take_handshake() {
            return Ok(m);
        }
        if let Some(f) = t.peer_failure() {
            return Err(f);
        }
        assert!(
            Instant::now() < deadline,
            "no handshake message in {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn channel(t: UcxTransport) -> Channel {
    let registry = MrRegistry::with_registrar(t.registrar());
    let addr = t.peer_addr().expect("connected by address");
    Channel::over(Arc::new(t), registry, ChannelConfig::default())
        .expect("one peer")
        .with_peer(addr, Vec::new())
}

fn builder(tls: &str) -> UcxTransportBuilder {
    // UCX 1.13 picks shared memory lanes only without peer error handling.
    UcxTransport::builder().detect_peer_failure(tls == "tcp")
}

/// A client and the server side of its connection, handshake done.
fn pair(tls: &str, at: &str) -> (Channel, Channel) {
    let at: SocketAddr = at.parse().unwrap();
    let c = UcxContext::for_address(at, ferrovia_ucx::Exposure::Unconfined, &[("TLS", tls)])
        .expect("ucp_init");
    let listener = UcxListener::bind(&c, at).unwrap();
    let addr = listener.local_addr();
    assert_ne!(addr.port(), 0);
    let client = builder(tls).connect_to(&c, addr).unwrap();
    client.send_handshake(b"hello").unwrap();
    let request = listener.next_request(WAIT).unwrap().expect("a request");
    assert_eq!(request.client_addr().ip(), addr.ip());
    let server = builder(tls).accept(&c, request).unwrap();
    assert_eq!(handshake(&server).unwrap(), b"hello");
    server.send_handshake(b"welcome").unwrap();
    assert_eq!(handshake(&client).unwrap(), b"welcome");
    (channel(client), channel(server))
}

fn send_and_write(client: &mut Channel, server: &mut Channel) {
    let msg = client
        .registry()
        .register_buffer(b"ping".to_vec(), RegisterOptions::local())
        .unwrap();
    let inbox = server
        .registry()
        .alloc(64, RegisterOptions::local().allow_remote_write())
        .unwrap();
    let remote = inbox.registration().remote().unwrap();
    let mut got = server
        .registry()
        .register_buffer(vec![0u8; 16], RegisterOptions::local())
        .unwrap();
    server
        .scope(|s| {
            let r = s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut got)?))?;
            client.write(&[Gather::of(&msg)?], remote)?;
            client.send(&[Gather::of(&msg)?])?;
            assert_eq!(r.wait(WAIT)?.byte_len(), 4);
            Ok::<_, TransportError>(())
        })
        .unwrap();
    assert_eq!(&got[..4], b"ping");
    assert_eq!(&inbox.to_vec()[..4], b"ping");
}

#[test]
fn a_client_connects_by_address_and_both_sides_post() {
    let (mut client, mut server) = pair("tcp", "127.0.0.1:0");
    send_and_write(&mut client, &mut server);
}

#[test]
fn ipv6_works_too() {
    let Some(ip) = global_ipv6() else {
        eprintln!("this host has no global IPv6 address: nothing to connect over");
        return;
    };
    let (mut client, mut server) = pair("tcp", &format!("[{ip}]:0"));
    assert!(client.peer_addr().unwrap().is_ipv6());
    send_and_write(&mut client, &mut server);
}

#[test]
fn shared_memory_carries_the_data_of_a_connection_made_over_tcp() {
    // The connection manager is tcp's; the data lanes are shared memory.
    let (mut client, mut server) = pair("sm,self,tcp", "127.0.0.1:0");
    send_and_write(&mut client, &mut server);
}

#[test]
fn requests_are_accepted_in_any_order_and_a_vanished_client_disturbs_no_one() {
    let c = ctx("tcp");
    let listener = UcxListener::bind(&c, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr();
    let clients: Vec<UcxTransport> = (0..3)
        .map(|i| {
            let t = builder("tcp").connect_to(&c, addr).unwrap();
            t.send_handshake(&[i]).unwrap();
            t
        })
        .collect();
    let mut requests: Vec<_> = (0..3)
        .map(|_| listener.next_request(WAIT).unwrap().expect("a request"))
        .collect();
    // Accept the last first; the middle client goes away before its
    // request is answered.
    requests.reverse();
    let mut clients: Vec<Option<UcxTransport>> = clients.into_iter().map(Some).collect();
    let mut served = Vec::new();
    for r in requests {
        let t = builder("tcp").accept(&c, r).unwrap();
        let hello = handshake(&t).unwrap();
        if hello == [1] {
            drop(clients[1].take());
            continue;
        }
        t.send_handshake(&hello).unwrap();
        served.push((hello[0] as usize, t));
    }
    assert_eq!(served.len(), 2);
    for (i, t) in served {
        let client = clients[i].take().unwrap();
        assert_eq!(handshake(&client).unwrap(), [i as u8]);
        let (mut a, mut b) = (channel(client), channel(t));
        send_and_write(&mut a, &mut b);
    }
}

#[test]
fn nothing_listening_fails_the_endpoint_at_once() {
    let c = ctx("tcp");
    // A port nothing listens on: bound and closed again.
    let addr: SocketAddr = {
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap()
    };
    let started = Instant::now();
    let t = builder("tcp").connect_to(&c, addr).unwrap();
    t.send_handshake(b"anyone?").unwrap();
    assert_eq!(handshake(&t), Err(EndpointFailure::NotConnected));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_rejected_request_fails_the_client_endpoint() {
    let c = ctx("tcp");
    let listener = UcxListener::bind(&c, "127.0.0.1:0".parse().unwrap()).unwrap();
    let t = builder("tcp")
        .connect_to(&c, listener.local_addr())
        .unwrap();
    t.send_handshake(b"let me in").unwrap();
    listener
        .next_request(WAIT)
        .unwrap()
        .expect("a request")
        .reject();
    assert_eq!(handshake(&t), Err(EndpointFailure::Rejected));
}

#[test]
fn a_port_in_use_is_refused_by_name() {
    let c = ctx("tcp");
    let first = UcxListener::bind(&c, "127.0.0.1:0".parse().unwrap()).unwrap();
    let taken = first.local_addr();
    match UcxListener::bind(&c, taken) {
        Err(UcxError::AddrInUse { addr }) => assert_eq!(addr, taken),
        other => panic!("expected AddrInUse: {other:?}"),
    }
    let e = UcxListener::bind(&c, taken).unwrap_err();
    assert!(e.to_string().contains(&taken.to_string()), "{e}");
}

#[test]
fn a_peer_that_goes_away_fails_pending_work_naming_its_address() {
    let (client, mut server) = pair("tcp", "127.0.0.1:0");
    let client_addr = server.peer_addr().unwrap();
    let mut inbox = server
        .registry()
        .register_buffer(vec![0u8; 16], RegisterOptions::local())
        .unwrap();
    let r = server.scope(|s| {
        let never = s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
        drop(client);
        let started = Instant::now();
        match never.wait(WAIT) {
            Err(TransportError::Disconnected { addr, .. }) => assert_eq!(addr, client_addr),
            other => panic!("expected a disconnect naming {client_addr}: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(5));
        Ok::<_, TransportError>(())
    });
    assert!(r.is_ok(), "{r:?}");
    assert!(server.is_disconnected());
}

#[test]
fn an_overlong_handshake_message_is_refused_before_sending() {
    let c = ctx("tcp");
    let listener = UcxListener::bind(&c, "127.0.0.1:0".parse().unwrap()).unwrap();
    let t = builder("tcp")
        .connect_to(&c, listener.local_addr())
        .unwrap();
    assert!(matches!(
        t.send_handshake(&[0; 257]),
        Err(UcxError::HandshakeTooLong { len: 257, max: 256 })
    ));
}

/// Neither side waits for the other to close: the one that goes first
/// says goodbye, the other finds its peer gone.
#[test]
fn both_sides_close_at_once() {
    let (client, server) = pair("tcp", "127.0.0.1:0");
    let t = Instant::now();
    drop(client);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let t = Instant::now();
    drop(server);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}
