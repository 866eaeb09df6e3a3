//! Reconnecting a connection a drain deadline flushed: a fresh queue pair
//! replaces it, while the other peers' connections keep running; by
//! endpoints, or through the transport seam (`renew`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{WAIT, buf, pair_with, pattern, star_with};
use ferrovia_channel::{
    ChannelConfig, Gather, MultiChannel, PeerReceiveWorkRequest, PeerSendWorkRequest,
    ReceiveWorkRequest, Scatter, ScopeError, SendWorkRequest, TransportError,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_verbs::ConnectOptions;
use ferrovia_verbs_transport::{
    VerbsChannel, VerbsConfig, VerbsMultiChannel, VerbsTransport, registry,
};

const DRAIN: Duration = Duration::from_millis(200);

/// Leaves `ch`'s connection flushed: a receive nobody fills, past the
/// drain deadline.
fn flush(ch: &mut ferrovia_channel::Channel) {
    let mut inbox = buf(ch, &[0; 16], RegisterOptions::local());
    let r = ch.scope(|s| {
        drop(s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?);
        Ok::<_, TransportError>(())
    });
    assert!(
        r.as_ref().err().and_then(ScopeError::drain).is_some(),
        "{r:?}"
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_flushed_channel_reconnects_and_carries_data_both_ways() {
    let (mut a, mut b) = pair_with(ConnectOptions::default(), DRAIN);
    flush(&mut a);
    let msg = buf(&a, &pattern(32, 5), RegisterOptions::local());
    let e = a.send(&[Gather::of(&msg).unwrap()]).unwrap_err();
    assert!(matches!(e, TransportError::Broken { peer: 0 }), "{e}");

    // Both sides renew; the exchange is in-process here.
    a.reconnect(|mine| {
        let theirs = b.renew_endpoint()?;
        b.connect(&mine)?;
        Ok::<_, TransportError>(theirs)
    })
    .unwrap();

    let mut inbox = buf(&b, &[0; 64], RegisterOptions::local());
    b.scope(|s| {
        let r = s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
        a.send(&[Gather::of(&msg)?])?;
        assert_eq!(r.wait(WAIT)?.into_received().unwrap(), &pattern(32, 5)[..]);
        Ok::<_, TransportError>(())
    })
    .unwrap();
    let back = buf(&b, &pattern(48, 9), RegisterOptions::local());
    let target = buf(&a, &[0; 48], RegisterOptions::local().allow_remote_write());
    b.write(
        &[Gather::of(&back).unwrap()],
        target.registration().remote().unwrap(),
    )
    .unwrap();
    assert_eq!(target.to_vec(), pattern(48, 9));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn reconnecting_one_peer_leaves_the_others_running() {
    let (mut hub, mut leaves) = star_with(3, |b| b.drain_deadline(DRAIN));
    let mut inbox = hub
        .registry()
        .register_buffer(vec![0u8; 3 * 32], RegisterOptions::local())
        .unwrap();
    // Break peer 1 only.
    let r = hub.scope(|s| {
        let (bytes, reg) = inbox.split_mut();
        drop(s.post_receive(PeerReceiveWorkRequest::new(
            1,
            ReceiveWorkRequest::new(Scatter::new(reg, &mut bytes[..32])?),
        ))?);
        Ok::<_, TransportError>(())
    });
    let d = r
        .as_ref()
        .err()
        .and_then(ScopeError::drain)
        .expect("a drain error");
    assert_eq!(d.flushed.len(), 1);

    let leaf = &mut leaves[1];
    hub.reconnect(1, |mine| {
        let theirs = leaf.renew_endpoint()?;
        leaf.connect(&mine)?;
        Ok::<_, TransportError>(theirs)
    })
    .unwrap();

    let msgs: Vec<_> = (0..3)
        .map(|i| buf(&leaves[i], &pattern(32, i as u8), RegisterOptions::local()))
        .collect();
    hub.scope(|s| {
        let (bytes, reg) = inbox.split_mut();
        let mut rs = Vec::new();
        for (peer, chunk) in bytes.chunks_mut(32).enumerate() {
            rs.push(s.post_receive(PeerReceiveWorkRequest::new(
                peer,
                ReceiveWorkRequest::new(Scatter::new(reg, chunk)?),
            ))?);
        }
        for (leaf, m) in leaves.iter_mut().zip(&msgs) {
            leaf.send(&[Gather::of(m)?])?;
        }
        for (peer, r) in rs.into_iter().enumerate() {
            assert_eq!(
                r.wait(WAIT)?.into_received().unwrap(),
                &pattern(32, peer as u8)[..]
            );
        }
        Ok::<_, TransportError>(())
    })
    .unwrap();
}

/// A message from `from` to `to` (peer 0 of each), checked.
fn one_message(from: &mut MultiChannel, to: &mut MultiChannel, seed: u8) {
    let msg = from
        .registry()
        .register_buffer(pattern(40, seed), RegisterOptions::local())
        .unwrap();
    let mut inbox = to
        .registry()
        .register_buffer(vec![0u8; 64], RegisterOptions::local())
        .unwrap();
    to.scope(|rx| {
        let r = rx.post_receive(PeerReceiveWorkRequest::new(
            0,
            ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
        ))?;
        from.scope(|tx| {
            let g = [Gather::of(&msg)?];
            tx.post_send(PeerSendWorkRequest::new(0, SendWorkRequest::new(&g)?))?
                .wait(WAIT)
                .map(drop)
        })
        .map_err(|e| TransportError::Config(e.to_string()))?;
        assert_eq!(
            r.wait(WAIT)?.into_received().unwrap(),
            &pattern(40, seed)[..]
        );
        Ok::<_, TransportError>(())
    })
    .unwrap();
}

/// Two verbs transports in `pd` connected by their public endpoints, each
/// under `MultiChannel::over` (as a node's rails are).
fn transport_pair(pd: &ferrovia_verbs::ProtectionDomain) -> (MultiChannel, MultiChannel) {
    let mut cfg = ChannelConfig::default();
    cfg.drain_deadline = DRAIN;
    let verbs = VerbsConfig::default();
    let ta = VerbsTransport::new(pd, 1, &cfg, &verbs).unwrap();
    let tb = VerbsTransport::new(pd, 1, &cfg, &verbs).unwrap();
    ta.connect(0, &tb.endpoint(0).unwrap()).unwrap();
    tb.connect(0, &ta.endpoint(0).unwrap()).unwrap();
    let a = MultiChannel::over(Arc::new(ta), registry(pd), cfg.clone());
    let b = MultiChannel::over(Arc::new(tb), registry(pd), cfg);
    (a, b)
}

/// Two verbs transports connected by their public endpoints, each under
/// `MultiChannel::over` (as a node's rails are): a flushed connection is
/// renewed and reconnected through `Transport::renew` / `reconnect`, the
/// endpoint travelling as bytes; bytes that are no endpoint are refused.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_verbs_transport_reconnects_through_the_transport_seam() {
    let pd = common::pd();
    let (mut a, mut b) = transport_pair(&pd);
    one_message(&mut a, &mut b, 1);

    // A receive nobody fills, past the drain deadline: a's side flushed.
    let mut inbox = a
        .registry()
        .register_buffer(vec![0u8; 16], RegisterOptions::local())
        .unwrap();
    let r = a.scope(|s| {
        drop(s.post_receive(PeerReceiveWorkRequest::new(
            0,
            ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
        ))?);
        Ok::<_, TransportError>(())
    });
    assert!(
        r.as_ref().err().and_then(ScopeError::drain).is_some(),
        "{r:?}"
    );

    let mine = a.renew(0).unwrap();
    let theirs = b.renew(0).unwrap();
    assert!(matches!(
        a.connect_renewed(0, &[1]),
        Err(TransportError::Config(_))
    ));
    a.connect_renewed(0, &theirs).unwrap();
    b.connect_renewed(0, &mine).unwrap();
    one_message(&mut a, &mut b, 2);
    one_message(&mut b, &mut a, 3);
}

/// The queue pairs `device` holds now, from `rdma res show` (iproute2,
/// which sets up soft-RoCE too): one line per device, `... qp N ...`.
fn device_qps(device: &str) -> u64 {
    let out = std::process::Command::new("rdma")
        .args(["res", "show"])
        .output()
        .unwrap_or_else(|e| panic!("this test counts QPs with iproute2's `rdma res show`: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(&format!("{device}:")))
        .unwrap_or_else(|| panic!("`rdma res show` has no line for {device}: {text}"));
    let mut words = line.split_whitespace();
    words
        .by_ref()
        .find(|w| *w == "qp")
        .and_then(|_| words.next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no QP count in {line:?}"))
}

/// A connection renewed again and again holds at most one replaced QP
/// per side (the device's own count says so), and still carries data. A
/// soak's thousands of reconnects once kept every replaced QP until the
/// channel dropped, and grew a rank past 250 MB.
#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn renewing_a_connection_many_times_frees_the_replaced_queue_pairs() {
    let pd = common::pd();
    let device = pd.context().name().to_owned();
    let (mut a, mut b) = transport_pair(&pd);
    one_message(&mut a, &mut b, 1);
    let before = device_qps(&device);
    for _ in 0..200 {
        let mine = a.renew(0).unwrap();
        let theirs = b.renew(0).unwrap();
        a.connect_renewed(0, &theirs).unwrap();
        b.connect_renewed(0, &mine).unwrap();
    }
    let after = device_qps(&device);
    assert!(
        after <= before + 2,
        "{device} held {before} QPs before 200 renewals of one connection and {after} after"
    );
    one_message(&mut a, &mut b, 2);
    one_message(&mut b, &mut a, 3);
    drop((a, b));
    assert!(
        device_qps(&device) + 2 <= before,
        "the channels' QPs outlived them"
    );
}
