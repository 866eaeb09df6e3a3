//! MultiChannel device tests: one hub, three peers.

mod common;

use common::{WAIT, buf, pattern, remote_rw, star};
use ferrovia_channel::{
    Gather, PeerReadWorkRequest, PeerReceiveWorkRequest, PeerSendWorkRequest, PeerWriteWorkRequest,
    ReadWorkRequest, ReceiveWorkRequest, Scatter, SendWorkRequest, TransportError,
    WriteWorkRequest,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_verbs_transport::VerbsMultiChannel;

const PEERS: usize = 3;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn every_operation_with_three_peers() {
    let (mut hub, mut leaves) = star(PEERS);
    assert_eq!(hub.peers(), PEERS);
    let out: Vec<_> = (0..PEERS)
        .map(|i| buf(&leaves[i], &pattern(100, i as u8), RegisterOptions::local()))
        .collect();
    let mut hub_in = hub
        .registry()
        .register_buffer(vec![0u8; PEERS * 128], RegisterOptions::local())
        .unwrap();
    let hub_out = hub
        .registry()
        .register_buffer(pattern(200, 77), RegisterOptions::local())
        .unwrap();
    let leaf_in: Vec<_> = (0..PEERS)
        .map(|i| buf(&leaves[i], &[0; 128], remote_rw()))
        .collect();
    let mut leaf_rx: Vec<_> = (0..PEERS)
        .map(|i| buf(&leaves[i], &[0; 128], RegisterOptions::local()))
        .collect();
    let leaf_remote: Vec<_> = leaf_in
        .iter()
        .map(|b| b.registration().remote().unwrap())
        .collect();
    let mut reads = hub
        .registry()
        .register_buffer(vec![0u8; PEERS * 100], RegisterOptions::local())
        .unwrap();

    hub.scope(|s| {
        assert_eq!(s.peers(), PEERS);
        // Gather-receive one message from every peer.
        let (bytes, reg) = hub_in.split_mut();
        let mut wrs = Vec::new();
        for (peer, chunk) in bytes.chunks_mut(128).enumerate() {
            wrs.push(PeerReceiveWorkRequest::new(
                peer,
                ReceiveWorkRequest::new(Scatter::new(reg, chunk)?),
            ));
        }
        let recvs = s.post_gather_receive(wrs)?;
        for (leaf, m) in leaves.iter_mut().zip(&out) {
            leaf.send(&[Gather::of(m)?])?;
        }
        for (peer, h) in recvs.into_iter().enumerate() {
            assert_eq!(
                h.wait(WAIT)?.into_received().unwrap(),
                &pattern(100, peer as u8)[..]
            );
        }

        // Scatter-write different slices to every peer.
        let g: Vec<[Gather<'_>; 1]> = (0..PEERS)
            .map(|p| Ok([Gather::range(&hub_out, p * 50..p * 50 + 50)?]))
            .collect::<Result<_, TransportError>>()?;
        let writes = (0..PEERS)
            .map(|p| {
                Ok(PeerWriteWorkRequest::new(
                    p,
                    WriteWorkRequest::new(&g[p], leaf_remote[p])?,
                ))
            })
            .collect::<Result<Vec<_>, TransportError>>()?;
        for h in s.post_scatter_write(writes)? {
            h.wait(WAIT)?;
        }

        // Gather-read 100 bytes back from every peer.
        let (bytes, reg) = reads.split_mut();
        let mut wrs = Vec::new();
        for (p, chunk) in bytes.chunks_mut(100).enumerate() {
            wrs.push(PeerReadWorkRequest::new(
                p,
                ReadWorkRequest::new(Scatter::new(reg, chunk)?, leaf_remote[p])?,
            ));
        }
        for (p, h) in s.post_gather_read(wrs)?.into_iter().enumerate() {
            let got = h.wait(WAIT)?.into_buffer().unwrap();
            assert_eq!(&got[..50], &pattern(200, 77)[p * 50..p * 50 + 50]);
        }

        // Multicast one send, and a scatter send, to every peer.
        let all = [Gather::range(&hub_out, 0..20)?];
        for round in 0..2 {
            let hs = if round == 0 {
                s.post_multicast_send(0..PEERS, SendWorkRequest::new(&all)?)?
            } else {
                s.post_scatter_send(
                    (0..PEERS)
                        .map(|p| PeerSendWorkRequest::new(p, SendWorkRequest::new(&all).unwrap())),
                )?
            };
            for (leaf, inbox) in leaves.iter_mut().zip(leaf_rx.iter_mut()) {
                let n = leaf.receive(Scatter::range(inbox, 0..100)?)?;
                assert_eq!(n, 20);
            }
            for h in hs {
                h.wait(WAIT)?;
            }
        }
        Ok::<_, TransportError>(())
    })
    .unwrap();
    for (p, (written, received)) in leaf_in.iter().zip(&leaf_rx).enumerate() {
        assert_eq!(
            &written.to_vec()[..50],
            &pattern(200, 77)[p * 50..p * 50 + 50]
        );
        assert_eq!(&received[..20], &pattern(200, 77)[..20]);
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_bad_peer_index_is_a_typed_error() {
    let (mut hub, _leaves) = star(2);
    let b = hub
        .registry()
        .register_buffer(vec![1u8; 8], RegisterOptions::local())
        .unwrap();
    let r = hub.scope(|s| {
        let g = [Gather::of(&b)?];
        s.post_send(PeerSendWorkRequest::new(5, SendWorkRequest::new(&g)?))
            .map(drop)
    });
    match r {
        Err(e) => assert!(
            matches!(
                e.closure(),
                Some(TransportError::NoSuchPeer { peer: 5, count: 2 })
            ),
            "{e}"
        ),
        Ok(()) => panic!("peer 5 of 2 was accepted"),
    }
    assert!(matches!(
        hub.endpoint(2),
        Err(TransportError::NoSuchPeer { .. })
    ));
}
