//! Device tests of the connection manager (`ferrovia_verbs::cm`): connect
//! by address on a real (soft-)RoCE device. Run by `cargo xtask test`;
//! ignored under plain `cargo test`.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::thread;

use common::{Buf, WAIT, ok, pattern};
use ferrovia_verbs::cm::{
    ACCEPT_PRIVATE_DATA_MAX, CONNECT_PRIVATE_DATA_MAX, CmConnection, CmListener, cm_connect,
};
use ferrovia_verbs::{AccessFlags, RecvWr, SendWr};

/// The device's IPv4 address (its IPv4-mapped GID).
fn ipv4() -> IpAddr {
    let ctx = common::device();
    let port = ctx.active_port().unwrap().port;
    let gid = ctx
        .gid_table(port)
        .unwrap()
        .into_iter()
        .find(|g| g.gid.is_ipv4_mapped())
        .expect("the device has an IPv4 address (an IPv4-mapped GID)");
    IpAddr::V6(gid.gid.0.into()).to_canonical()
}

fn any_port() -> SocketAddr {
    SocketAddr::new(ipv4(), 0)
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
