//! Reconnecting a connection a drain deadline flushed: a fresh queue pair
//! replaces it, while the other peers' connections keep running.

mod common;

use std::time::Duration;

use common::{WAIT, buf, pair_with, pattern, star_with};
use ferrovia_channel::{
    Gather, PeerReceiveWorkRequest, ReceiveWorkRequest, Scatter, ScopeError, TransportError,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_verbs::ConnectOptions;

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
        let theirs = b.renew()?;
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
        let theirs = leaf.renew()?;
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
