//! The shared receive pool on the host, through a pool double: a pooled
//! receive names its sender, per-peer and pooled receives do not mix, the
//! pool has a depth, a failed pooled receive names the sender and breaks
//! only its connection, and a drain deadline gives the pool's receives
//! back whether the transport reports them or stops the pool silently.

use std::time::Duration;

use ferrovia_channel::engine::run_scope;
use ferrovia_channel::transport::SharedFlush;
use ferrovia_channel::{
    ChannelConfig, Gather, PeerReceiveWorkRequest, PeerSendWorkRequest, ReceiveWorkRequest,
    Scatter, ScopeError, SendWorkRequest, TransportError, Unpolled,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_testkit::PoolDouble;
use ferrovia_testkit::{Double, Mode};
use ferrovia_types::WcStatus;

fn cfg() -> ChannelConfig {
    let mut cfg = ChannelConfig::default();
    cfg.drain_deadline = Duration::from_millis(50);
    cfg.op_timeout = Duration::from_millis(100);
    cfg
}

#[test]
fn a_pooled_receive_names_the_peer_whose_message_it_took() {
    let double = PoolDouble::new(4, 8, SharedFlush::Reported);
    let target = ferrovia_testkit::target(&double, cfg());
    let registry = ferrovia_testkit::registry();
    let mut inbox = registry
        .register_buffer(vec![7u8; 64], RegisterOptions::local())
        .unwrap();
    let r = run_scope(&target, Unpolled::Drain, |s| {
        let (bytes, reg) = inbox.split_mut();
        let mut handles = Vec::new();
        for chunk in bytes.chunks_mut(16) {
            handles.push(s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, chunk)?))?);
        }
        for (peer, len) in [(2, 5), (0, 16), (3, 1), (2, 9)] {
            assert!(double.deliver(peer, len, WcStatus::SUCCESS));
        }
        let mut got = Vec::new();
        for h in handles {
            let done = h.wait(Duration::from_secs(1))?;
            let peer = done.peer();
            got.push((peer, done.into_received().map(|b| b.len())));
        }
        Ok::<_, TransportError>(got)
    })
    .unwrap();
    assert_eq!(
        r,
        vec![
            (Some(2), Some(5)),
            (Some(0), Some(16)),
            (Some(3), Some(1)),
            (Some(2), Some(9)),
        ]
    );
}

#[test]
fn per_peer_and_pooled_receives_do_not_mix() {
    let registry = ferrovia_testkit::registry();
    let mut buf = registry
        .register_buffer(vec![0u8; 16], RegisterOptions::local())
        .unwrap();
    // A pool channel refuses a receive for one peer...
    let pool = PoolDouble::new(2, 4, SharedFlush::Reported);
    let target = ferrovia_testkit::target(&pool, cfg());
    let r = run_scope(&target, Unpolled::Drain, |s| {
        let wr = ReceiveWorkRequest::new(Scatter::of(&mut buf)?);
        s.post_receive(PeerReceiveWorkRequest::new(1, wr)).map(drop)
    });
    assert!(
        matches!(
            r.as_ref().err().and_then(ScopeError::closure),
            Some(TransportError::SharedPoolOnly { peer: 1 })
        ),
        "{r:?}"
    );
    // ...and a channel without one refuses a receive for any peer.
    let plain = Double::new(2, 4, Mode::Instant);
    let target = ferrovia_testkit::target(&plain, cfg());
    let r = run_scope(&target, Unpolled::Drain, |s| {
        let wr = ReceiveWorkRequest::new(Scatter::of(&mut buf)?);
        s.post_receive_any(wr).map(drop)
    });
    assert!(
        matches!(
            r.as_ref().err().and_then(ScopeError::closure),
            Some(TransportError::NoSharedPool)
        ),
        "{r:?}"
    );
    assert_eq!(plain.in_flight(), 0, "nothing was posted");
}

#[test]
fn the_pool_holds_no_more_than_its_depth() {
    let double = PoolDouble::new(2, 2, SharedFlush::Reported);
    let target = ferrovia_testkit::target(&double, cfg());
    let registry = ferrovia_testkit::registry();
    let mut inbox = registry
        .register_buffer(vec![0u8; 24], RegisterOptions::local())
        .unwrap();
    let r = run_scope(&target, Unpolled::Drain, |s| {
        let (bytes, reg) = inbox.split_mut();
        let mut chunks = bytes.chunks_mut(8);
        let mut handles = Vec::new();
        for _ in 0..2 {
            let c = chunks.next().unwrap();
            handles.push(s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, c)?))?);
        }
        let third = chunks.next().unwrap();
        let full = s
            .post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, third)?))
            .map(drop);
        // Let the drain finish cleanly: both pooled receives take a message.
        assert!(double.deliver(0, 8, WcStatus::SUCCESS));
        assert!(double.deliver(1, 8, WcStatus::SUCCESS));
        Ok::<_, TransportError>(full)
    })
    .unwrap();
    assert!(
        matches!(
            r,
            Err(TransportError::QueueFull {
                queue: "shared receive",
                depth: 2,
                ..
            })
        ),
        "{r:?}"
    );
}

#[test]
fn a_failed_pooled_receive_names_the_sender_and_breaks_only_its_connection() {
    let double = PoolDouble::new(3, 4, SharedFlush::Reported);
    let target = ferrovia_testkit::target(&double, cfg());
    let registry = ferrovia_testkit::registry();
    let mut inbox = registry
        .register_buffer(vec![0u8; 16], RegisterOptions::local())
        .unwrap();
    let msg = registry
        .register_buffer(vec![1u8; 8], RegisterOptions::local())
        .unwrap();
    let r = run_scope(&target, Unpolled::Drain, |s| {
        let h = s.post_receive_any(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
        // Peer 1 sent more than the receive holds.
        assert!(double.deliver(1, 0, WcStatus::LOC_LEN_ERR));
        let e = h.wait(Duration::from_secs(1)).unwrap_err();
        let g = [Gather::of(&msg)?];
        let to_1 = s
            .post_send(PeerSendWorkRequest::new(1, SendWorkRequest::new(&g)?))
            .map(drop);
        let to_2 = s
            .post_send(PeerSendWorkRequest::new(2, SendWorkRequest::new(&g)?))
            .map(drop);
        Ok::<_, TransportError>((e, to_1, to_2))
    })
    .unwrap();
    let (e, to_1, to_2) = r;
    match &e {
        TransportError::Completion(c) => {
            assert_eq!(c.status, WcStatus::LOC_LEN_ERR);
            assert_eq!(c.peer, Some(1), "the error names the sender");
            assert!(e.to_string().contains("peer 1"), "{e}");
        }
        other => panic!("expected a completion error, got {other:?}"),
    }
    assert!(
        matches!(to_1, Err(TransportError::Broken { peer: 1 })),
        "{to_1:?}"
    );
    assert!(to_2.is_ok(), "peer 2 is untouched: {to_2:?}");
}

#[test]
fn a_reported_flush_gives_the_pool_back_and_leaves_it_usable() {
    let double = PoolDouble::new(2, 4, SharedFlush::Reported);
    let target = ferrovia_testkit::target(&double, cfg());
    let registry = ferrovia_testkit::registry();
    let mut inbox = registry
        .register_buffer(vec![0u8; 32], RegisterOptions::local())
        .unwrap();
    let r = run_scope(&target, Unpolled::Drain, |s| {
        let (bytes, reg) = inbox.split_mut();
        for c in bytes.chunks_mut(16) {
            drop(s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, c)?))?);
        }
        Ok::<_, TransportError>(())
    });
    let d = r
        .as_ref()
        .err()
        .and_then(ScopeError::drain)
        .expect("a drain error");
    assert_eq!(d.flushed.len(), 2, "{d:?}");
    assert_eq!(double.pooled(), 0);
    // The pool takes receives again.
    let r = run_scope(&target, Unpolled::Drain, |s| {
        let h = s.post_receive_any(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
        assert!(double.deliver(1, 3, WcStatus::SUCCESS));
        Ok::<_, TransportError>(h.wait(Duration::from_secs(1))?.peer())
    });
    assert_eq!(r.unwrap(), Some(1));
}

#[test]
fn a_silent_flush_gives_the_pool_back_and_refuses_it_afterwards() {
    let double = PoolDouble::new(2, 4, SharedFlush::Silent);
    let target = ferrovia_testkit::target(&double, cfg());
    let registry = ferrovia_testkit::registry();
    let mut inbox = registry
        .register_buffer(vec![0u8; 48], RegisterOptions::local())
        .unwrap();
    let r = run_scope(&target, Unpolled::Drain, |s| {
        let (bytes, reg) = inbox.split_mut();
        let mut first = None;
        for c in bytes.chunks_mut(16) {
            let h = s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, c)?))?;
            first.get_or_insert(h);
        }
        // One message arrives; the other two receives never fill.
        assert!(double.deliver(0, 4, WcStatus::SUCCESS));
        Ok::<_, TransportError>(first.unwrap().wait(Duration::from_secs(1))?.peer())
    });
    let d = r
        .as_ref()
        .err()
        .and_then(ScopeError::drain)
        .expect("a drain error");
    assert_eq!(d.flushed.len(), 2, "{d:?}");
    assert_eq!(
        double.pooled(),
        2,
        "the transport still holds them, unreachable"
    );
    // The buffers are the program's again (the borrow ended), and the
    // pool is closed.
    inbox[0] = 1;
    let r = run_scope(&target, Unpolled::Drain, |s| {
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
}
