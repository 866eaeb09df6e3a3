//! The scenarios of connection by address, run on UCX on the host
//! (`by_address_ucx`) and on verbs in the VM (`device_by_address`).
#![allow(dead_code, unreachable_pub)]

use std::net::{IpAddr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use ferrovia_channel::{Channel, Gather, Scatter, TransportError};
use ferrovia_mr::{RegisterOptions, RemoteMemoryRegion};
use ferrovia_node::{
    ACCEPT_DATA_MAX, Backend, CONNECT_DATA_MAX, ConnectError, Connector, Listener, REJECT_DATA_MAX,
};

/// How long any single wait may take.
pub const T: Duration = Duration::from_secs(10);

/// One of this host's global IPv6 addresses, from `/proc/net/if_inet6`.
pub fn global_ipv6() -> Option<std::net::Ipv6Addr> {
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

/// A backend and the local address to listen on.
pub struct Case {
    pub backend: Backend,
    pub ip: IpAddr,
    /// The interface of a link-local IPv6 address.
    pub scope: u32,
    pub ucx: Option<ferrovia_ucx::UcxTransportBuilder>,
}

impl Case {
    pub fn new(backend: Backend, ip: IpAddr) -> Case {
        Case {
            backend,
            ip,
            scope: 0,
            ucx: None,
        }
    }

    /// The address to listen on: port 0 on `ip`.
    pub fn any_port(&self) -> SocketAddr {
        match self.ip {
            IpAddr::V4(ip) => SocketAddr::new(ip.into(), 0),
            IpAddr::V6(ip) => std::net::SocketAddrV6::new(ip, 0, 0, self.scope).into(),
        }
    }

    pub fn listener(&self) -> Listener {
        let mut b = Listener::builder(self.any_port()).backend(self.backend);
        if let Some(u) = &self.ucx {
            b = b.ucx(u.clone());
        }
        let l = b.bind().unwrap();
        assert_eq!(l.backend(), self.backend);
        assert_ne!(l.local_addr().port(), 0);
        l
    }

    pub fn connector(&self) -> Connector {
        let mut c = Connector::new().backend(self.backend);
        if let Some(u) = &self.ucx {
            c = c.ucx(u.clone());
        }
        c
    }

    /// A client and a server trade descriptors in their private data,
    /// write into each other's memory, and message each other.
    pub fn one_client(&self) {
        let listener = self.listener();
        let addr = listener.local_addr();
        let connector = self.connector();
        let client = thread::spawn(move || {
            let out = connector.resolve(addr, T).unwrap();
            let inbox = out
                .registry()
                .alloc(64, RegisterOptions::local().allow_remote_write())
                .unwrap();
            let mine = inbox.registration().remote().unwrap().encode();
            assert!(mine.len() <= CONNECT_DATA_MAX);
            let mut ch = out.connect(&mine, T).unwrap();
            assert_eq!(ch.peer_addr(), Some(addr));
            let theirs = RemoteMemoryRegion::decode(ch.peer_private_data()).unwrap();
            let msg = reg(&ch, b"from the client");
            ch.write(&[Gather::of(&msg).unwrap()], theirs).unwrap();
            ch.send(&[Gather::of(&msg).unwrap()]).unwrap();
            assert_eq!(receive(&mut ch), b"bye");
            // The server wrote before its goodbye.
            assert_eq!(&inbox.to_vec()[..15], b"from the server");
        });
        let incoming = listener.accept(T).unwrap();
        assert_eq!(incoming.peer_addr().ip(), self.ip);
        let theirs = RemoteMemoryRegion::decode(incoming.private_data()).unwrap();
        let inbox = incoming
            .registry()
            .alloc(64, RegisterOptions::local().allow_remote_write())
            .unwrap();
        let mine = inbox.registration().remote().unwrap().encode();
        let mut ch = incoming.accept(&mine, T).unwrap();
        assert_eq!(ch.peer_addr().map(|a| a.ip()), Some(self.ip));
        assert_eq!(
            RemoteMemoryRegion::decode(ch.peer_private_data()).unwrap(),
            theirs
        );
        assert_eq!(receive(&mut ch), b"from the client");
        assert_eq!(&inbox.to_vec()[..15], b"from the client");
        let msg = reg(&ch, b"from the server");
        ch.write(&[Gather::of(&msg).unwrap()], theirs).unwrap();
        let bye = reg(&ch, b"bye");
        ch.send(&[Gather::of(&bye).unwrap()]).unwrap();
        client.join().unwrap();
    }

    /// `n` clients connect at once, and one more gives up half-way; the
    /// server takes the requests as they come, answers them in reverse
    /// order, and serves each channel; the one that vanished fails only
    /// its own accept.
    pub fn many_clients(&self, n: u8) {
        let listener = self.listener();
        let addr = listener.local_addr();
        let vanisher = {
            let c = self.connector();
            thread::spawn(move || {
                let out = c.resolve(addr, T).unwrap();
                // Gives up long before any answer can come.
                let r = out.connect(b"vanish", Duration::from_millis(1));
                assert!(r.is_err(), "{r:?}");
            })
        };
        let clients: Vec<_> = (0..n)
            .map(|i| {
                let c = self.connector();
                thread::spawn(move || {
                    let mut ch = c.connect(addr, &[i], T).unwrap();
                    assert_eq!(ch.peer_private_data(), [i, i]);
                    let msg = reg(&ch, &[i; 3]);
                    ch.send(&[Gather::of(&msg).unwrap()]).unwrap();
                    assert_eq!(receive(&mut ch), [i; 5]);
                })
            })
            .collect();
        vanisher.join().unwrap();
        let mut requests = Vec::new();
        while requests.len() < usize::from(n) {
            let incoming = listener.accept(T).unwrap();
            if incoming.private_data() == b"vanish" {
                // Gone: its accept fails (or times out), alone.
                let r = incoming.accept(b"late", Duration::from_secs(2));
                assert!(r.is_err(), "the vanished client was accepted: {r:?}");
                continue;
            }
            requests.push(incoming);
        }
        let mut channels = Vec::new();
        for incoming in requests.into_iter().rev() {
            let i = incoming.private_data()[0];
            channels.push((i, incoming.accept(&[i, i], T).unwrap()));
        }
        for (i, ch) in &mut channels {
            assert_eq!(receive(ch), [*i; 3]);
            let reply = reg(ch, &[*i; 5]);
            ch.send(&[Gather::of(&reply).unwrap()]).unwrap();
        }
        for c in clients {
            c.join().unwrap();
        }
    }

    /// The private data limits, checked before anything is sent, are the
    /// same on both backends, and what is within them arrives exactly.
    pub fn private_data_limits(&self) {
        let listener = self.listener();
        let addr = listener.local_addr();
        match self
            .connector()
            .connect(addr, &[1; CONNECT_DATA_MAX + 1], T)
        {
            Err(ConnectError::PrivateDataTooLong {
                what,
                addr: a,
                len,
                max,
            }) => {
                assert_eq!((what, a, len, max), ("connect request", addr, 53, 52));
            }
            other => panic!("expected PrivateDataTooLong: {other:?}"),
        }
        let connect = |data: Vec<u8>| {
            let c = self.connector();
            thread::spawn(move || c.connect(addr, &data, T))
        };
        // An overlong accept fails before sending; the request is then
        // rejected.
        let a = connect(vec![2; CONNECT_DATA_MAX]);
        let incoming = listener.accept(T).unwrap();
        assert_eq!(incoming.private_data(), [2; CONNECT_DATA_MAX]);
        match incoming.accept(&[0; ACCEPT_DATA_MAX + 1], T) {
            Err(ConnectError::PrivateDataTooLong { what, len, max, .. }) => {
                assert_eq!((what, len, max), ("accept", 193, 192));
            }
            other => panic!("expected PrivateDataTooLong: {other:?}"),
        }
        assert!(a.join().unwrap().is_err());
        // An overlong reject likewise.
        let b = connect(vec![3]);
        match listener
            .accept(T)
            .unwrap()
            .reject(&[0; REJECT_DATA_MAX + 1])
        {
            Err(ConnectError::PrivateDataTooLong { what, len, max, .. }) => {
                assert_eq!((what, len, max), ("reject", 145, 144));
            }
            other => panic!("expected PrivateDataTooLong: {other:?}"),
        }
        assert!(b.join().unwrap().is_err());
        // A full reject arrives exactly.
        let c = connect(vec![4]);
        listener
            .accept(T)
            .unwrap()
            .reject(&[5; REJECT_DATA_MAX])
            .unwrap();
        match c.join().unwrap() {
            Err(ConnectError::Rejected {
                addr: a,
                private_data,
            }) => {
                assert_eq!(a, addr);
                assert_eq!(private_data, [5; REJECT_DATA_MAX]);
            }
            other => panic!("expected Rejected: {other:?}"),
        }
        // A full accept too, and an empty request is empty.
        let d = connect(Vec::new());
        let incoming = listener.accept(T).unwrap();
        assert!(incoming.private_data().is_empty());
        let _server = incoming.accept(&[6; ACCEPT_DATA_MAX], T).unwrap();
        let ch = d.join().unwrap().unwrap();
        assert_eq!(ch.peer_private_data(), [6; ACCEPT_DATA_MAX]);
    }

    /// Nothing listening and a port in use: typed errors naming the
    /// address, within the deadline.
    pub fn refusals(&self) {
        let gone = {
            let l = self.listener();
            l.local_addr()
        };
        let started = Instant::now();
        match self.connector().connect(gone, b"anyone?", T) {
            Err(ConnectError::NotListening { addr, backend }) => {
                assert_eq!((addr, backend), (gone, self.backend));
            }
            other => panic!("expected NotListening at {gone}: {other:?}"),
        }
        assert!(started.elapsed() < T);
        let first = self.listener();
        let taken = first.local_addr();
        let again = Listener::builder(taken).backend(self.backend).bind();
        match again {
            Err(ConnectError::AddrInUse { addr }) => assert_eq!(addr, taken),
            other => panic!("expected AddrInUse at {taken}: {other:?}"),
        }
    }

    /// An address no route leads to: `Unreachable` naming it, within the
    /// deadline.
    pub fn unreachable(&self, to: SocketAddr) {
        let started = Instant::now();
        let r = self.connector().connect(to, b"", T);
        match r {
            Err(ConnectError::Unreachable { addr, .. }) => assert_eq!(addr, to),
            other => panic!("expected Unreachable at {to}: {other:?}"),
        }
        assert!(started.elapsed() < T + Duration::from_secs(1));
    }

    /// A client that goes away fails the server's pending receive at
    /// once, with an error naming the client's address; posting after it
    /// fails the same way.
    pub fn disconnect_fails_pending_work(&self) {
        let listener = self.listener();
        let addr = listener.local_addr();
        let c = self.connector();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let client = thread::spawn(move || {
            let ch = c.connect(addr, b"", T).unwrap();
            // Leaves once the server's receive is posted.
            let _ = rx.recv_timeout(T);
            drop(ch);
        });
        let mut ch = listener.accept(T).unwrap().accept(b"", T).unwrap();
        let client_addr = ch.peer_addr().unwrap();
        let mut inbox = ch
            .registry()
            .register_buffer(vec![0u8; 16], RegisterOptions::local())
            .unwrap();
        let r = ch.scope(|s| {
            let pending = s.post_receive(ferrovia_channel::ReceiveWorkRequest::new(
                Scatter::of(&mut inbox)?,
            ))?;
            tx.send(()).unwrap();
            let started = Instant::now();
            match pending.wait(T) {
                Err(TransportError::Disconnected { addr, .. }) => assert_eq!(addr, client_addr),
                other => panic!("expected a disconnect naming {client_addr}: {other:?}"),
            }
            assert!(started.elapsed() < Duration::from_secs(5));
            Ok::<_, TransportError>(())
        });
        assert!(r.is_ok(), "{r:?}");
        client.join().unwrap();
        assert!(ch.is_disconnected());
        let msg = reg(&ch, b"late");
        match ch.send(&[Gather::of(&msg).unwrap()]) {
            Err(TransportError::Disconnected { addr, .. }) => assert_eq!(addr, client_addr),
            other => panic!("expected a disconnect naming {client_addr}: {other:?}"),
        }
    }

    /// `accept` with nobody connecting returns `Timeout` naming the
    /// listener, at its deadline.
    pub fn accept_deadline(&self) {
        let listener = self.listener();
        let started = Instant::now();
        match listener.accept(Duration::from_millis(300)) {
            Err(ConnectError::Timeout { addr, .. }) => assert_eq!(addr, listener.local_addr()),
            other => panic!("expected a timeout: {other:?}"),
        }
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_millis(1500),
            "{took:?}"
        );
    }
}

/// `bytes`, registered in `ch`'s registry.
pub fn reg(ch: &Channel, bytes: &[u8]) -> ferrovia_mr::RegisteredBuffer<ferrovia_mr::Local> {
    ch.registry()
        .register_buffer(bytes.to_vec(), RegisterOptions::local())
        .unwrap()
}

/// Receives one message on `ch`.
pub fn receive(ch: &mut Channel) -> Vec<u8> {
    let mut buf = reg(ch, &[0; 64]);
    let n = ch.receive(Scatter::of(&mut buf).unwrap()).unwrap();
    buf[..n].to_vec()
}
