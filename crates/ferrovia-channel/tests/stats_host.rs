//! `MultiChannel::stats()` on the host, through a transport double: what
//! was posted per peer and kind, with its bytes; completions by status,
//! flushes, reconnects and outstanding requests; the latency of a sample
//! of signalled requests.

use std::time::Duration;

use ferrovia_channel::{
    ChannelConfig, Gather, MultiChannel, PeerReadWorkRequest, PeerReceiveWorkRequest,
    PeerSendWorkRequest, PeerWriteWorkRequest, ReadWorkRequest, ReceiveWorkRequest, Scatter,
    SendWorkRequest, TransportError, WriteWorkRequest,
};
use ferrovia_mr::{RegisterOptions, RemoteMemoryRegion};
use ferrovia_testkit::{Double, Mode};
use ferrovia_types::WcStatus;

const WAIT: Duration = Duration::from_secs(1);

fn cfg() -> ChannelConfig {
    let mut cfg = ChannelConfig::default();
    cfg.drain_deadline = Duration::from_millis(50);
    cfg.op_timeout = Duration::from_millis(500);
    cfg
}

#[test]
fn every_request_is_counted_for_its_peer_and_kind() {
    let double = Double::new(3, 64, Mode::Instant);
    let mut multi = MultiChannel::over(double.clone(), ferrovia_testkit::registry(), cfg());
    let msg = multi
        .registry()
        .register_buffer(vec![1u8; 100], RegisterOptions::local())
        .unwrap();
    let mut back = multi
        .registry()
        .register_buffer(vec![0u8; 40], RegisterOptions::local())
        .unwrap();
    let mut inbox = multi
        .registry()
        .register_buffer(vec![0u8; 16], RegisterOptions::local())
        .unwrap();
    let remote = RemoteMemoryRegion::new(0x1000, 1 << 20, 2).unwrap();
    multi
        .scope(|s| {
            let g = [Gather::of(&msg)?];
            let part = [Gather::range(&msg, 0..10)?];
            // Peer 1: 3 sends of 100 B, a write of 10 B and a read of 40.
            for _ in 0..3 {
                s.post_send(PeerSendWorkRequest::new(1, SendWorkRequest::new(&g)?))?
                    .wait(WAIT)?;
            }
            s.post_write(PeerWriteWorkRequest::new(
                1,
                WriteWorkRequest::new(&part, remote)?,
            ))?
            .wait(WAIT)?;
            s.post_read(PeerReadWorkRequest::new(
                1,
                ReadWorkRequest::new(Scatter::of(&mut back)?, remote)?,
            ))?
            .wait(WAIT)?;
            // Peer 2: a list of 5 writes of 100 B (one completion) and a
            // receive.
            let wrs = vec![WriteWorkRequest::new(&g, remote)?; 5];
            s.post_write_list(2, &wrs)?.wait(WAIT)?;
            s.post_receive(PeerReceiveWorkRequest::new(
                2,
                ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
            ))?
            .wait(WAIT)?;
            Ok::<_, TransportError>(())
        })
        .unwrap();
    let stats = multi.stats();
    assert_eq!(stats.peers.len(), 3);
    let (p0, p1, p2) = (&stats.peers[0], &stats.peers[1], &stats.peers[2]);
    assert_eq!(p0.ops.total(), 0);
    assert_eq!(p0.completions, vec![]);
    assert_eq!((p1.ops.send, p1.ops.write, p1.ops.read), (3, 1, 1));
    assert_eq!(
        (p1.bytes.send, p1.bytes.write, p1.bytes.read),
        (300, 10, 40)
    );
    assert_eq!(p1.completed(WcStatus::SUCCESS), 5);
    assert_eq!((p2.ops.write, p2.bytes.write), (5, 500));
    assert_eq!(p2.ops.receive, 1);
    // The list's unsignalled writes complete with its last: one
    // completion for the list, one for the receive (the double reports
    // no bytes received).
    assert_eq!(p2.completed(WcStatus::SUCCESS), 2);
    assert_eq!(p2.bytes.receive, 0);
    assert!(stats.peers.iter().all(|p| p.outstanding == 0));
    assert!(stats.peers.iter().all(|p| p.failed() == 0));
}

#[test]
fn flushes_failures_reconnects_and_outstanding_are_counted() {
    let double = Double::new(2, 64, Mode::Held);
    let mut multi = MultiChannel::over(double.clone(), ferrovia_testkit::registry(), cfg());
    let msg = multi
        .registry()
        .register_buffer(vec![1u8; 8], RegisterOptions::local())
        .unwrap();
    let r = multi.scope(|s| {
        let g = [Gather::of(&msg)?];
        for _ in 0..4 {
            let h = s.post_send(PeerSendWorkRequest::new(1, SendWorkRequest::new(&g)?))?;
            std::mem::drop(h);
        }
        assert_eq!(s.target().stats().peers[1].outstanding, 4);
        Ok::<_, TransportError>(())
    });
    // Held: the drain deadline passes, the peer is flushed, its requests
    // complete as flushed.
    assert!(r.is_err(), "{r:?}");
    let p1 = multi.stats().peers[1].clone();
    assert_eq!(p1.flushes, 1);
    assert_eq!(p1.completed(WcStatus::WR_FLUSH_ERR), 4);
    assert_eq!(p1.failed(), 4);
    assert_eq!(p1.outstanding, 0);
    // Renewing the connection is a reconnect (the double cannot renew).
    let _ = multi.renew(1);
    assert_eq!(multi.stats().peers[1].reconnects, 1);
    assert_eq!(multi.stats().peers[0].reconnects, 0);
}

#[test]
fn a_sample_of_signalled_requests_is_timed() {
    let double = Double::new(1, 64, Mode::Instant);
    let mut multi = MultiChannel::over(double, ferrovia_testkit::registry(), cfg());
    let msg = multi
        .registry()
        .register_buffer(vec![1u8; 8], RegisterOptions::local())
        .unwrap();
    multi
        .scope(|s| {
            let g = [Gather::of(&msg)?];
            for _ in 0..640 {
                s.post_send(PeerSendWorkRequest::new(0, SendWorkRequest::new(&g)?))?
                    .wait(WAIT)?;
            }
            Ok::<_, TransportError>(())
        })
        .unwrap();
    let latency = &multi.stats().peers[0].latency;
    assert_eq!(latency.samples(), 10, "one in 64 of 640: {latency:?}");
    let (p50, max) = (latency.quantile(0.5).unwrap(), latency.max().unwrap());
    assert!(p50 <= max && max < Duration::from_secs(1), "{latency:?}");
    assert!(latency.min().unwrap() > Duration::ZERO);
}
