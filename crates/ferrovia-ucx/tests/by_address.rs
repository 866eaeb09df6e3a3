//! Transports of one peer connected by worker address, as a connection
//! made by address is once its owners traded their workers' addresses
//! (ferrovia-node's front door): the channel API over each, over tcp and
//! over shared memory (which a connection through UCX's socket connection
//! manager could not use), and a peer that goes away, told by the owner's
//! link where UCX cannot tell (shared memory).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrovia_channel::{
    Channel, ChannelConfig, Gather, ReceiveWorkRequest, Scatter, TransportError,
};
use ferrovia_mr::{MrRegistry, RegisterOptions};
use ferrovia_ucx::{UcxContext, UcxError, UcxTransport};

const WAIT: Duration = Duration::from_secs(10);

fn channel(t: UcxTransport) -> Channel {
    let registry = MrRegistry::with_registrar(t.registrar());
    let addr = t.peer_addr().expect("connected by address");
    Channel::over(Arc::new(t), registry, ChannelConfig::default())
        .expect("one peer")
        .with_peer(addr, Vec::new())
}

/// Two connected TCP streams (the owners' links), and the client's and
/// server's addresses.
fn links() -> ((TcpStream, SocketAddr), (TcpStream, SocketAddr)) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let server_addr = l.local_addr().unwrap();
    let client = TcpStream::connect(server_addr).unwrap();
    let (server, client_addr) = l.accept().unwrap();
    ((client, server_addr), (server, client_addr))
}

/// A client and a server transport connected by worker address, each
/// watching its link.
fn pair(tls: &str) -> (Channel, Channel) {
    let ctx = UcxContext::with_options(&[("TLS", tls)]).expect("ucp_init");
    let mut client = UcxTransport::builder().start(&ctx).unwrap();
    let mut server = UcxTransport::builder().start(&ctx).unwrap();
    let ((client_link, server_addr), (server_link, client_addr)) = links();
    let (cw, sw) = (client.address().to_vec(), server.address().to_vec());
    server.connect_peer(&cw, client_addr).unwrap();
    client.connect_peer(&sw, server_addr).unwrap();
    server.watch_link(server_link).unwrap();
    client.watch_link(client_link).unwrap();
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
fn a_connection_by_worker_address_carries_sends_and_writes_over_tcp() {
    let (mut client, mut server) = pair("tcp");
    send_and_write(&mut client, &mut server);
    send_and_write(&mut server, &mut client);
}

#[test]
fn a_connection_by_worker_address_works_on_shared_memory_alone() {
    let (mut client, mut server) = pair("sm,self");
    send_and_write(&mut client, &mut server);
    send_and_write(&mut server, &mut client);
}

#[test]
fn a_transport_connects_once() {
    let ctx = UcxContext::with_options(&[("TLS", "tcp")]).unwrap();
    let mut t = UcxTransport::builder().start(&ctx).unwrap();
    let other = UcxTransport::builder().start(&ctx).unwrap();
    let at: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let ((link, _), _) = links();
    assert!(matches!(t.watch_link(link), Err(UcxError::NotConnected)));
    t.connect_peer(other.address(), at).unwrap();
    assert!(matches!(
        t.connect_peer(other.address(), at),
        Err(UcxError::AlreadyConnected)
    ));
    drop(t);
    drop(other);
}

/// The peer's process goes away without a goodbye (its link closes, as
/// when it dies): the pending receive fails at once, naming it. Over
/// shared memory nothing else would tell.
fn a_peer_whose_link_closes_fails_pending_work(tls: &str) {
    let ctx = UcxContext::with_options(&[("TLS", tls)]).expect("ucp_init");
    let mut server = UcxTransport::builder()
        .detect_peer_failure(false)
        .start(&ctx)
        .unwrap();
    let peer = UcxTransport::builder().start(&ctx).unwrap();
    let ((client_link, _), (server_link, client_addr)) = links();
    server.connect_peer(peer.address(), client_addr).unwrap();
    server.watch_link(server_link).unwrap();
    let mut server = channel(server);
    let mut inbox = server
        .registry()
        .register_buffer(vec![0u8; 16], RegisterOptions::local())
        .unwrap();
    let r = server.scope(|s| {
        let never = s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
        drop(client_link);
        let started = Instant::now();
        match never.wait(WAIT) {
            Err(TransportError::Disconnected { addr, .. }) => assert_eq!(addr, client_addr),
            other => panic!("expected a disconnect naming {client_addr}: {other:?}"),
        }
        let waited = started.elapsed();
        println!("{tls}: the closed link failed the receive in {waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        Ok::<_, TransportError>(())
    });
    assert!(r.is_ok(), "{r:?}");
    assert!(server.is_disconnected());
    drop(peer);
}

#[test]
fn a_peer_whose_link_closes_fails_pending_work_over_tcp() {
    a_peer_whose_link_closes_fails_pending_work("tcp");
}

#[test]
fn a_peer_whose_link_closes_fails_pending_work_over_shared_memory() {
    a_peer_whose_link_closes_fails_pending_work("sm,self");
}

/// Neither side waits for the other to close: the one that goes first
/// says goodbye, the other finds its peer gone.
#[test]
fn both_sides_close_at_once() {
    let (client, server) = pair("tcp");
    let t = Instant::now();
    drop(client);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let t = Instant::now();
    drop(server);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}
