//! The shared receive pool on a device (a shared receive queue): one hub
//! with a pool, leaves with their own receive queues.

mod common;

use std::time::Duration;

use common::{WAIT, buf, pattern, star_with};
use ferrovia_channel::{
    Gather, ReceiveWorkRequest, Scatter, ScopeError, SendWorkRequest, TransportError,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_types::WcStatus;
use ferrovia_verbs_transport::VerbsMultiChannel;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn pooled_receives_name_their_sender_and_the_limit_event_fires() {
    let (mut hub, mut leaves) = star_with(3, |b| b.shared_receives(8));
    let mut inbox = hub
        .registry()
        .register_buffer(vec![0u8; 8 * 64], RegisterOptions::local())
        .unwrap();
    let msgs: Vec<Vec<_>> = (0..3)
        .map(|l| {
            (0..2)
                .map(|k| {
                    buf(
                        &leaves[l],
                        &pattern(40 + k, (10 * l + k) as u8),
                        RegisterOptions::local(),
                    )
                })
                .collect()
        })
        .collect();
    let extra = buf(&leaves[0], &pattern(8, 99), RegisterOptions::local());
    hub.scope(|s| {
        let (bytes, reg) = inbox.split_mut();
        let mut handles = Vec::new();
        for chunk in bytes.chunks_mut(64) {
            handles.push(s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, chunk)?))?);
        }
        assert_eq!(s.shared_receives_posted(), 8);
        s.arm_shared_limit(3)?;
        for (leaf, m) in leaves.iter_mut().zip(&msgs) {
            for one in m {
                leaf.send(&[Gather::of(one)?])?;
            }
        }
        let mut seen = Vec::new();
        for h in handles.drain(..6) {
            let done = h.wait(WAIT)?;
            let peer = done.peer().expect("a pooled receive names its sender");
            let got = done.into_received().unwrap().to_vec();
            let k = got.len() - 40;
            assert_eq!(
                got,
                pattern(40 + k, (10 * peer + k) as u8),
                "from peer {peer}"
            );
            seen.push((peer, k));
        }
        seen.sort_unstable();
        assert_eq!(seen, [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]);
        // Two of eight left, fewer than the armed three.
        let mut fired = false;
        for _ in 0..100 {
            fired = s.shared_limit_reached()?;
            if fired {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(fired, "the SRQ limit event surfaced");
        assert!(!s.shared_limit_reached()?, "once per arming");
        // Fill the last two so the scope ends clean.
        leaves[0].send(&[Gather::of(&extra)?])?;
        leaves[0].send(&[Gather::of(&extra)?])?;
        for h in handles {
            assert_eq!(h.wait(WAIT)?.peer(), Some(0));
        }
        Ok::<_, TransportError>(())
    })
    .unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_message_longer_than_the_pooled_receive_is_a_length_error_naming_the_sender() {
    let (mut hub, mut leaves) = star_with(3, |b| b.shared_receives(4));
    let mut inbox = hub
        .registry()
        .register_buffer(vec![0u8; 32], RegisterOptions::local())
        .unwrap();
    let long = buf(&leaves[1], &pattern(64, 1), RegisterOptions::local());
    let short = buf(&leaves[2], &pattern(16, 2), RegisterOptions::local());
    let r = hub.scope(|s| {
        let (bytes, reg) = inbox.split_mut();
        let (a, b) = bytes.split_at_mut(16);
        let first = s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, a)?))?;
        // The sender sees its send fail (the receiver refused it).
        assert!(leaves[1].send(&[Gather::of(&long)?]).is_err());
        let e = first.wait(WAIT).unwrap_err();
        let second = s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, b)?))?;
        leaves[2].send(&[Gather::of(&short)?])?;
        let done = second.wait(WAIT)?;
        Ok::<_, TransportError>((e, done.peer(), done.into_received().unwrap().to_vec()))
    });
    let (e, peer, got) = r.unwrap();
    match &e {
        TransportError::Completion(c) => {
            // The verbs status for it is LOC_LEN_ERR; soft-RoCE reports
            // LOC_QP_OP_ERR instead (its copy_data fails with EINVAL, not
            // ENOSPC, which rxe_resp maps to a malformed WQE).
            assert!(
                [WcStatus::LOC_LEN_ERR, WcStatus::LOC_QP_OP_ERR].contains(&c.status),
                "{e}"
            );
            assert_eq!(c.peer, Some(1), "{e}");
        }
        other => panic!("expected a length error, got {other}"),
    }
    assert_eq!((peer, got), (Some(2), pattern(16, 2)), "other peers go on");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn senders_faster_than_the_refill_lose_no_message() {
    const PEERS: usize = 3;
    const EACH: u32 = 200;
    const POOL: usize = 4;
    let (mut hub, leaves) = star_with(PEERS, |b| b.shared_receives(POOL as u32));
    let mut inbox = hub
        .registry()
        .register_buffer(vec![0u8; POOL * 8], RegisterOptions::local())
        .unwrap();
    // Each leaf sends its sequence numbers as fast as its queue allows;
    // the hub's four receives run out at once and the senders ride on
    // receiver-not-ready retries (rnr_retry 7: forever).
    let senders: Vec<_> = leaves
        .into_iter()
        .map(|mut leaf| {
            std::thread::spawn(move || {
                let msgs: Vec<_> = (0..EACH)
                    .map(|i| buf(&leaf, &u64::from(i).to_le_bytes(), RegisterOptions::local()))
                    .collect();
                leaf.scope(|s| {
                    let gathers: Vec<[Gather<'_>; 1]> = msgs
                        .iter()
                        .map(|m| Ok([Gather::of(m)?]))
                        .collect::<Result<_, TransportError>>()?;
                    for chunk in gathers.chunks(32) {
                        let mut hs = Vec::new();
                        for g in chunk {
                            hs.push(s.post_send(SendWorkRequest::new(g)?)?);
                        }
                        for h in hs {
                            h.wait(WAIT)?;
                        }
                    }
                    Ok::<_, TransportError>(())
                })
                .map_err(|e| e.to_string())
            })
        })
        .collect();
    let next = hub.scope(|s| {
        let (bytes, reg) = inbox.split_mut();
        let mut ring = std::collections::VecDeque::new();
        for chunk in bytes.chunks_mut(8) {
            ring.push_back(s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, chunk)?))?);
        }
        let mut next = [0u64; PEERS];
        for _ in 0..PEERS as u32 * EACH {
            let done = ring.pop_front().unwrap().wait(WAIT)?;
            let peer = done.peer().unwrap();
            let got = done.into_received().unwrap();
            let seq = u64::from_le_bytes(got[..8].try_into().unwrap());
            assert_eq!(
                seq, next[peer],
                "peer {peer}'s messages arrive in order, none lost"
            );
            next[peer] += 1;
            // A slow refill.
            std::thread::sleep(Duration::from_micros(200));
            let again = done_scatter(got, reg)?;
            if next.iter().sum::<u64>() + (ring.len() as u64) < u64::from(PEERS as u32 * EACH) {
                ring.push_back(s.post_receive_any(ReceiveWorkRequest::new(again))?);
            }
        }
        Ok::<_, TransportError>(next)
    });
    for t in senders {
        t.join().unwrap().unwrap();
    }
    assert_eq!(next.unwrap(), [u64::from(EACH); PEERS]);
}

fn done_scatter<'a>(
    bytes: &'a mut [u8],
    reg: &'a ferrovia_mr::Registration,
) -> Result<Scatter<'a>, TransportError> {
    Scatter::new(reg, bytes)
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_drain_deadline_stops_the_pool_and_refuses_it_afterwards() {
    let (mut hub, _leaves) = star_with(2, |b| {
        b.shared_receives(4)
            .drain_deadline(Duration::from_millis(200))
    });
    let mut inbox = hub
        .registry()
        .register_buffer(vec![0u8; 64], RegisterOptions::local())
        .unwrap();
    let r = hub.scope(|s| {
        let (bytes, reg) = inbox.split_mut();
        for chunk in bytes.chunks_mut(16) {
            drop(s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, chunk)?))?);
        }
        Ok::<_, TransportError>(())
    });
    let d = r
        .as_ref()
        .err()
        .and_then(ScopeError::drain)
        .expect("a drain error");
    assert_eq!(d.flushed.len(), 4, "{d:?}");
    // The buffer is the program's again; the pool takes no more.
    inbox.fill(1);
    let r = hub.scope(|s| {
        s.post_receive_any(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))
            .map(drop)
    });
    assert!(
        matches!(
            r.as_ref().err().and_then(ScopeError::closure),
            Some(TransportError::SharedPoolFlushed)
        ),
        "{r:?}"
    );
    // Nor does a renewed queue pair attach to it, by endpoints or through
    // the transport seam.
    assert!(matches!(
        hub.renew_endpoint(0),
        Err(TransportError::SharedPoolFlushed)
    ));
    assert!(matches!(
        hub.renew(1),
        Err(TransportError::SharedPoolFlushed)
    ));
}
