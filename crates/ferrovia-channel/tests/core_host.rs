//! The engine behind every scope, on the host through a transport double:
//! draining and flushing at the deadline, list posting that fails half-way,
//! broken connections, errors that name their peer, and fresh work-request
//! ids.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use ferrovia_channel::engine::run_scope;
use ferrovia_channel::{
    ChannelConfig, Gather, PeerReceiveWorkRequest, PeerSendWorkRequest, ReceiveWorkRequest,
    Scatter, ScopeError, SendWorkRequest, TransportError, Unpolled, WriteWorkRequest,
};
use ferrovia_mr::{RegisterOptions, RemoteMemoryRegion};
use ferrovia_testkit::{Double, Mode};

const DRAIN: Duration = Duration::from_millis(50);

fn cfg() -> ChannelConfig {
    let mut cfg = ChannelConfig::default();
    cfg.drain_deadline = DRAIN;
    cfg.op_timeout = Duration::from_millis(100);
    cfg
}

#[test]
fn outstanding_work_is_flushed_at_the_drain_deadline_and_reported() {
    let double = Double::new(2, 8, Mode::Held);
    let target = ferrovia_testkit::target(&double, cfg());
    let registry = ferrovia_testkit::registry();
    let mut inbox = registry
        .register_buffer(vec![0u8; 64], RegisterOptions::local())
        .unwrap();
    let msg = registry
        .register_buffer(vec![1u8; 8], RegisterOptions::local())
        .unwrap();
    let mut posted = Vec::new();
    let started = Instant::now();
    let r = run_scope(&target, Unpolled::Drain, |s| {
        let (bytes, reg) = inbox.split_mut();
        for chunk in bytes.chunks_mut(16) {
            let h = s.post_receive(PeerReceiveWorkRequest::new(
                1,
                ReceiveWorkRequest::new(Scatter::new(reg, chunk)?),
            ))?;
            posted.push(h.wr_id());
        }
        let g = [Gather::of(&msg)?];
        let h = s.post_send(PeerSendWorkRequest::new(0, SendWorkRequest::new(&g)?))?;
        posted.push(h.wr_id());
        Ok::<_, TransportError>(())
    });
    let took = started.elapsed();
    let d = match r {
        Err(ScopeError::Drain(d)) => d,
        other => panic!("expected a drain error, got {other:?}"),
    };
    let mut flushed = d.flushed.clone();
    flushed.sort_unstable();
    posted.sort_unstable();
    assert_eq!(flushed, posted, "every outstanding request is reported");
    assert!(d.failed.is_empty(), "{d}");
    assert!(took >= DRAIN, "returned before the deadline: {took:?}");
    assert_eq!(
        double.flushes.load(std::sync::atomic::Ordering::Relaxed),
        2,
        "both peers flushed"
    );
    assert_eq!(double.in_flight(), 0);
    // Flushed connections refuse new work until they are reconnected.
    let again = run_scope(&target, Unpolled::Drain, |s| {
        let g = [Gather::of(&msg)?];
        s.post_send(PeerSendWorkRequest::new(0, SendWorkRequest::new(&g)?))
            .map(drop)
    });
    assert!(
        matches!(
            again.as_ref().err().and_then(|e| e.closure()),
            Some(TransportError::Broken { peer: 0 })
        ),
        "{again:?}"
    );
    inbox[0] = 1; // the buffer is free again
}

#[test]
fn a_list_that_finds_the_queue_full_half_way_leaves_no_unposted_request_behind() {
    // Depth 4: the second chunk of an 8-request list waits for room that
    // never comes (nothing completes), and fails after the op timeout.
    let double = Double::new(1, 4, Mode::Held);
    let target = ferrovia_testkit::target(&double, cfg());
    let registry = ferrovia_testkit::registry();
    let src = registry
        .register_buffer(vec![7u8; 64], RegisterOptions::local())
        .unwrap();
    let remote = RemoteMemoryRegion::new(0x1000, 64, 9).unwrap();
    let started = Instant::now();
    let r = run_scope(&target, Unpolled::Drain, |s| {
        let g = [Gather::of(&src)?];
        let wrs = [WriteWorkRequest::new(&g, remote)?; 8];
        s.post_write_list(0, &wrs).map(drop)
    });
    // The scope ends: the 4 posted writes are flushed at the deadline, and
    // no request that never reached the transport is waited for (which
    // would hold the drain until the process aborts).
    match r {
        Err(ScopeError::Both { closure, drain }) => {
            assert!(
                matches!(closure, TransportError::QueueFull { depth: 4, .. }),
                "{closure}"
            );
            assert_eq!(drain.flushed.len(), 4, "{drain}");
            assert_eq!(drain.unpolled, 0);
        }
        other => panic!("expected the queue-full error and a flush, got {other:?}"),
    }
    assert_eq!(double.posted.load(std::sync::atomic::Ordering::Relaxed), 4);
    assert_eq!(double.in_flight(), 0);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_list_the_transport_refuses_is_unposted_from_the_failing_chunk_on() {
    let double = Double::new(1, 64, Mode::Instant);
    double.fail_after(16); // the first chunk of 16 goes, the second fails
    let target = ferrovia_testkit::target(&double, cfg());
    let registry = ferrovia_testkit::registry();
    let src = registry
        .register_buffer(vec![7u8; 64], RegisterOptions::local())
        .unwrap();
    let remote = RemoteMemoryRegion::new(0x1000, 64, 9).unwrap();
    run_scope(&target, Unpolled::Drain, |s| {
        let g = [Gather::of(&src)?];
        let wrs = [WriteWorkRequest::new(&g, remote)?; 40];
        let err = s
            .post_write_list(0, &wrs)
            .err()
            .expect("the second chunk is refused");
        assert!(matches!(err, TransportError::Config(_)), "{err}");
        Ok::<_, TransportError>(())
    })
    .expect("the posted chunk completes and nothing else is outstanding");
    assert_eq!(double.posted.load(std::sync::atomic::Ordering::Relaxed), 16);
}

#[test]
fn every_request_gets_a_work_request_id_never_seen_before() {
    let double = Double::new(1, 4, Mode::Instant);
    let target = ferrovia_testkit::target(&double, cfg());
    let registry = ferrovia_testkit::registry();
    let msg = registry
        .register_buffer(vec![1u8; 8], RegisterOptions::local())
        .unwrap();
    let mut seen = HashSet::new();
    run_scope(&target, Unpolled::Drain, |s| {
        let g = [Gather::of(&msg)?];
        for _ in 0..10_000 {
            let h = s.post_send(PeerSendWorkRequest::new(0, SendWorkRequest::new(&g)?))?;
            assert!(seen.insert(h.wr_id()), "wr_id {:#x} reused", h.wr_id());
            h.wait(Duration::from_secs(1))?;
        }
        Ok::<_, TransportError>(())
    })
    .unwrap();
    // A handful of slots served them all: ids differ by their epoch.
    let slots: HashSet<u32> = seen.iter().map(|&id| id as u32).collect();
    assert!(slots.len() <= 16, "{} slots used", slots.len());
}

/// Issue 13 part 2: errors name the peer, and a wait on work with a peer
/// whose connection is known broken ends at once, even if the transport
/// never completes that work.
#[test]
fn errors_name_their_peer_and_nothing_waits_on_a_broken_one() {
    let double = Double::new(2, 8, Mode::Held);
    let target = ferrovia_testkit::target(&double, cfg());
    let registry = ferrovia_testkit::registry();
    let mut inbox = registry
        .register_buffer(vec![0u8; 16], RegisterOptions::local())
        .unwrap();
    let msg = registry
        .register_buffer(vec![1u8; 8], RegisterOptions::local())
        .unwrap();
    let r = run_scope(&target, Unpolled::Drain, |s| {
        let g = [Gather::of(&msg)?];
        let held = s.post_send(PeerSendWorkRequest::new(0, SendWorkRequest::new(&g)?))?;
        match held.wait(Duration::from_millis(10)) {
            Err(TransportError::Timeout { peer: 0, .. }) => {}
            other => panic!("expected a timeout naming peer 0: {other:?}"),
        }
        let first = s.post_send(PeerSendWorkRequest::new(1, SendWorkRequest::new(&g)?))?;
        let never = s.post_receive(PeerReceiveWorkRequest::new(
            1,
            ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
        ))?;
        double.fail_one(1);
        match first.wait(Duration::from_secs(1)) {
            Err(TransportError::Completion(c)) => {
                assert_eq!(c.peer, Some(1));
                assert!(c.to_string().contains("with peer 1"), "{c}");
            }
            other => panic!("expected peer 1's failure: {other:?}"),
        }
        let started = Instant::now();
        let waited = never.wait(Duration::from_secs(10));
        assert!(
            matches!(waited, Err(TransportError::Broken { peer: 1 })),
            "{waited:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(1));
        Ok::<_, TransportError>(())
    });
    // The drain flushes what the double held, and its report names peers.
    match r {
        Err(ScopeError::Drain(d)) => assert_eq!(d.flushed.len(), 2, "{d}"),
        other => panic!("{other:?}"),
    }
}
