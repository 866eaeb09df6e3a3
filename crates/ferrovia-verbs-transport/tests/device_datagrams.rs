//! Device tests of datagrams over UD queue pairs (soft-RoCE): many
//! senders to one receiver with the 40-byte header stripped and the
//! sender named, the size limit a typed error, a cut message reported, a
//! lost one no error, another Q_Key's dropped. Run by `cargo xtask test`.

#![allow(clippy::needless_range_loop)]

mod common;

use std::time::Duration;

use common::pd;
use ferrovia_channel::{DatagramTransport, Datagrams, TransportError};
use ferrovia_verbs_transport::{DatagramOptions, VerbsDatagrams};

const WAIT: Duration = Duration::from_secs(10);

/// `n` datagram endpoints on one device, each knowing every other.
fn mesh(n: usize, opts: &[DatagramOptions]) -> Vec<VerbsDatagrams> {
    let pd = pd();
    let mut ends: Vec<VerbsDatagrams> = (0..n)
        .map(|i| VerbsDatagrams::open(&pd, &opts[i.min(opts.len() - 1)]).unwrap())
        .collect();
    let addrs: Vec<_> = ends.iter().map(VerbsDatagrams::address).collect();
    for e in &mut ends {
        e.connect(&addrs).unwrap();
    }
    ends
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn three_senders_to_one_receiver_named_and_whole() {
    let mut ends = mesh(4, &[DatagramOptions::default()]);
    let max = ends[0].max_message();
    assert!(max >= 256, "the path MTU bounds a datagram: {max}");
    let mut ends: Vec<Datagrams> = ends
        .drain(..)
        .map(|e| Datagrams::new(Box::new(e), usize::MAX))
        .collect();
    for round in 0..10u8 {
        for s in 1..4usize {
            let msg: Vec<u8> = (0..(s * 100 + round as usize))
                .map(|i| i as u8 ^ s as u8 ^ round)
                .collect();
            ends[s].send_to(0, &msg, WAIT).unwrap();
        }
    }
    let mut got = vec![Vec::new(); 4];
    let mut buf = vec![0u8; max];
    for _ in 0..30 {
        let d = ends[0]
            .recv(&mut buf, WAIT)
            .unwrap()
            .expect("a datagram within the wait");
        assert!(!d.truncated());
        got[d.from()].push(buf[..d.len()].to_vec());
    }
    for s in 1..4usize {
        assert_eq!(got[s].len(), 10, "every datagram of sender {s}");
        for (round, m) in got[s].iter().enumerate() {
            let want: Vec<u8> = (0..(s * 100 + round))
                .map(|i| i as u8 ^ s as u8 ^ round as u8)
                .collect();
            assert_eq!(
                m, &want,
                "sender {s} round {round}: the header stripped, the bytes whole"
            );
        }
    }
    assert!(
        ends[0]
            .recv(&mut buf, Duration::from_millis(200))
            .unwrap()
            .is_none()
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn limits_cuts_losses_and_strangers() {
    let ends = mesh(2, &[DatagramOptions::default().receives(4)]);
    let max = ends[0].max_message();
    let mut d: Vec<Datagrams> = ends
        .into_iter()
        .map(|e| Datagrams::new(Box::new(e), usize::MAX))
        .collect();
    // Above the limit: refused before sending.
    let big = vec![1u8; max + 1];
    let e = d[1].send_to(0, &big, WAIT).unwrap_err();
    assert!(
        matches!(e, TransportError::DatagramTooLong { len, max: m } if len == max + 1 && m == max),
        "{e}"
    );
    assert!(matches!(
        d[1].send_to(5, b"x", WAIT),
        Err(TransportError::NoSuchPeer { peer: 5, count: 2 })
    ));
    // At the limit: whole; into a smaller buffer: cut, and said so.
    let full: Vec<u8> = (0..max).map(|i| i as u8).collect();
    d[1].send_to(0, &full, WAIT).unwrap();
    let mut small = [0u8; 100];
    let got = d[0].recv(&mut small, WAIT).unwrap().unwrap();
    assert_eq!(
        (got.len(), got.copied(), got.truncated(), got.from()),
        (max, 100, true, 1)
    );
    assert_eq!(&small[..], &full[..100]);
    // More than the receiver holds posted: the rest is lost, which is no
    // error for the sender, and the receiver gets what it held.
    for i in 0..12u8 {
        d[1].send_to(0, &[i; 8], WAIT).unwrap();
    }
    let mut buf = vec![0u8; max];
    let mut arrived = 0;
    while let Some(g) = d[0].recv(&mut buf, Duration::from_millis(500)).unwrap() {
        assert_eq!(g.len(), 8);
        arrived += 1;
    }
    assert!(
        (1..12).contains(&arrived),
        "{arrived} of 12 arrived with 4 receives posted"
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_datagram_with_another_q_key_is_dropped() {
    // Endpoint 1 sends with the Q_Key endpoint 0 published, but endpoint
    // 0 is told endpoint 2's key differs: its messages carry it, and
    // endpoint 0's queue pair drops them.
    let pd = pd();
    let mut a = VerbsDatagrams::open(&pd, &DatagramOptions::default()).unwrap();
    let mut b = VerbsDatagrams::open(&pd, &DatagramOptions::default()).unwrap();
    let mut wrong = a.address();
    wrong.qkey ^= 1;
    a.connect(&[a.address(), b.address()]).unwrap();
    b.connect(&[wrong, b.address()]).unwrap();
    b.send_to(0, b"with the wrong key", WAIT).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(
        a.recv_into(&mut buf, Duration::from_millis(500)).unwrap(),
        None
    );
    b.connect(&[a.address(), b.address()]).unwrap();
    b.send_to(0, b"with the right key", WAIT).unwrap();
    let got = a.recv_into(&mut buf, WAIT).unwrap().unwrap();
    assert_eq!(
        (&buf[..got.len()], got.from()),
        (&b"with the right key"[..], 1)
    );
}
