//! `Channel` over any one-peer transport (`Channel::over`), on the host
//! through a transport double: the single-peer scoped API, the peer's
//! address and private data of a connection made by address, and a
//! disconnect failing pending work with an error naming the address.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrovia_channel::{
    Channel, ChannelConfig, Gather, ReceiveWorkRequest, Scatter, SendWorkRequest, TransportError,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_testkit::{Double, Mode};

fn cfg() -> ChannelConfig {
    let mut cfg = ChannelConfig::default();
    cfg.drain_deadline = Duration::from_millis(50);
    cfg.op_timeout = Duration::from_millis(500);
    cfg
}

#[test]
fn a_channel_runs_over_any_one_peer_transport() {
    let double = Double::new(1, 8, Mode::Instant);
    let addr: SocketAddr = "[fd00::7]:4791".parse().unwrap();
    let mut ch = Channel::over(double.clone(), ferrovia_testkit::registry(), cfg())
        .unwrap()
        .with_peer(addr, b"hello".to_vec());
    assert_eq!(ch.peer_addr(), Some(addr));
    assert_eq!(ch.peer_private_data(), b"hello");
    assert!(!ch.is_disconnected());
    let msg = ch
        .registry()
        .register_buffer(vec![1u8; 8], RegisterOptions::local())
        .unwrap();
    let mut inbox = ch
        .registry()
        .register_buffer(vec![0u8; 8], RegisterOptions::local())
        .unwrap();
    ch.scope(|s| {
        let g = [Gather::of(&msg)?];
        let sent = s.post_send(SendWorkRequest::new(&g)?)?;
        let got = s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
        sent.wait(Duration::from_secs(1))?;
        got.wait(Duration::from_secs(1))?;
        Ok::<_, TransportError>(())
    })
    .unwrap();
    assert_eq!(double.posted.load(std::sync::atomic::Ordering::Relaxed), 2);
    ch.send(&[Gather::of(&msg).unwrap()]).unwrap();
}

#[test]
fn a_channel_has_exactly_one_peer() {
    let double = Double::new(2, 8, Mode::Instant);
    let r = Channel::over(double, ferrovia_testkit::registry(), cfg());
    match r {
        Err(TransportError::Config(why)) => assert!(why.contains("2"), "{why}"),
        other => panic!("expected a configuration error: {other:?}"),
    }
}

#[test]
fn a_disconnect_fails_pending_work_naming_the_address() {
    let double = Double::new(1, 8, Mode::Held);
    let addr: SocketAddr = "192.0.2.9:7471".parse().unwrap();
    let mut ch = Channel::over(double.clone(), ferrovia_testkit::registry(), cfg())
        .unwrap()
        .with_peer(addr, Vec::new());
    let mut inbox = ch
        .registry()
        .register_buffer(vec![0u8; 8], RegisterOptions::local())
        .unwrap();
    let r = ch.scope(|s| {
        let never = s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
        double.disconnect(addr);
        let started = Instant::now();
        match never.wait(Duration::from_secs(10)) {
            Err(TransportError::Disconnected {
                peer: 0,
                addr: a,
                completion: Some(c),
            }) => {
                assert_eq!(a, addr);
                assert_eq!(c.peer, Some(0));
            }
            other => panic!("expected a disconnect naming {addr}: {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(1));
        Ok::<_, TransportError>(())
    });
    assert!(r.is_ok(), "{r:?}");
    assert!(ch.is_disconnected());
    // Posting to the gone peer fails at once, naming it too.
    let msg = ch
        .registry()
        .register_buffer(vec![1u8; 8], RegisterOptions::local())
        .unwrap();
    match ch.send(&[Gather::of(&msg).unwrap()]) {
        Err(TransportError::Disconnected { addr: a, .. }) => assert_eq!(a, addr),
        other => panic!("expected a disconnect naming {addr}: {other:?}"),
    }
}
