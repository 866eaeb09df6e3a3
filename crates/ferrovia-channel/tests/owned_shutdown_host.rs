//! An owner of owned requests going away, on the host through transport
//! doubles: receives and reads are flushed at once, sends, writes and
//! atomics are waited for (bounded by the drain deadline) and then
//! flushed, and no buffer is freed before its request is reported.

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use ferrovia_channel::engine::{Flushed, OwnedOp, OwnedTicket};
use ferrovia_channel::transport::SharedFlush;
use ferrovia_channel::{ChannelConfig, OwnedBuf, ScopeTarget};
use ferrovia_mr::{MrRegistry, RegisterOptions, RegisteredBuffer, RemoteMemoryRegion};
use ferrovia_testkit::PoolDouble;
use ferrovia_testkit::{Double, Mode};
use ferrovia_types::WcStatus;

/// A long drain deadline: what dropping must not wait for receives.
fn cfg(drain: Duration) -> ChannelConfig {
    let mut cfg = ChannelConfig::default();
    cfg.drain_deadline = drain;
    cfg.op_timeout = Duration::from_millis(100);
    cfg
}

fn buf(registry: &MrRegistry) -> RegisteredBuffer {
    registry
        .register_buffer(vec![0; 64], RegisterOptions::local())
        .unwrap()
}

fn post(core: &ferrovia_channel::engine::ChannelCore, op: OwnedOp) -> OwnedTicket {
    match core.try_post_owned(op, None) {
        Ok(t) => t,
        Err(e) => panic!("refused: {e:?}"),
    }
}

#[test]
fn dropping_an_engine_flushes_its_receives_and_reads_at_once() {
    let double = Double::new(2, 8, Mode::Held);
    let registry = ferrovia_testkit::registry();
    let remote = RemoteMemoryRegion::new(0x1000, 64, 9).unwrap();
    let start;
    {
        let target = ferrovia_testkit::target(&double, cfg(Duration::from_secs(10)));
        let core = target.core();
        core.abandon_owned(post(core, OwnedOp::receive(0, buf(&registry), 0..64)));
        core.abandon_owned(post(core, OwnedOp::read(1, buf(&registry), 0..64, remote)));
        assert_eq!(registry.stats().live_registrations, 2);
        start = Instant::now();
    }
    let took = start.elapsed();
    assert!(took < Duration::from_secs(1), "drop took {took:?}");
    assert_eq!(double.flushes.load(SeqCst), 2, "both peers flushed");
    assert_eq!(double.in_flight(), 0, "every flush was reported");
    assert_eq!(registry.stats().live_registrations, 0);
}

#[test]
fn dropping_an_engine_waits_for_its_sends_up_to_the_drain_deadline() {
    let double = Double::new(2, 8, Mode::Held);
    let registry = ferrovia_testkit::registry();
    let drain = Duration::from_millis(300);
    let start;
    {
        let target = ferrovia_testkit::target(&double, cfg(drain));
        let core = target.core();
        let src = OwnedBuf::Plain(buf(&registry));
        core.abandon_owned(post(core, OwnedOp::send(0, src, 0..8)));
        core.abandon_owned(post(core, OwnedOp::receive(0, buf(&registry), 0..64)));
        core.abandon_owned(post(core, OwnedOp::receive(1, buf(&registry), 0..64)));
        start = Instant::now();
    }
    let took = start.elapsed();
    assert!(took >= drain, "a send in flight is waited for: {took:?}");
    assert!(took < drain + Duration::from_secs(1), "{took:?}");
    assert_eq!(double.flushes.load(SeqCst), 2, "each peer flushed once");
    assert_eq!(registry.stats().live_registrations, 0);
}

#[test]
fn flushing_inbound_work_leaves_peers_with_outbound_work_alone() {
    let double = Double::new(3, 8, Mode::Held);
    let target = ferrovia_testkit::target(&double, cfg(Duration::from_secs(10)));
    let core = target.core();
    let registry = ferrovia_testkit::registry();
    let remote = RemoteMemoryRegion::new(0x1000, 64, 9).unwrap();
    let src = OwnedBuf::Plain(buf(&registry));
    let tickets = [
        post(core, OwnedOp::write(0, src, 0..8, remote)),
        post(core, OwnedOp::receive(0, buf(&registry), 0..64)),
        post(core, OwnedOp::receive(1, buf(&registry), 0..64)),
        post(core, OwnedOp::read(2, buf(&registry), 0..64, remote)),
    ];
    assert_eq!(core.outbound_outstanding(), 1);
    let first = core.flush_inbound();
    assert_eq!(first.peers, [1, 2]);
    assert_eq!((first.inbound, first.outbound, first.pool), (2, 0, 0));
    assert!(core.is_broken(1) && core.is_broken(2) && !core.is_broken(0));
    core.progress().unwrap();
    assert_eq!(core.awaiting_reports(), 2, "peer 0's write and receive");
    double.complete_all(); // the write completes (and the receive)
    core.progress().unwrap();
    assert_eq!(core.outbound_outstanding(), 0);
    let rest = core.flush_remaining(&first);
    assert!(rest.is_empty(), "nothing left: {rest:?}");
    let mut all = Flushed::default();
    all.merge(first);
    all.merge(rest);
    assert_eq!(all.peers, [1, 2]);
    for t in tickets {
        core.abandon_owned(t);
    }
    let mut back = Vec::new();
    core.take_returned(&mut back);
    let flushed = back
        .iter()
        .filter(|r| r.completion.status == WcStatus::WR_FLUSH_ERR)
        .count();
    assert_eq!((back.len(), flushed), (4, 2));
}

fn pooled_receives_at_drop(flush: SharedFlush) {
    let double = PoolDouble::new(2, 4, flush);
    let registry = ferrovia_testkit::registry();
    let start;
    {
        let target = ferrovia_testkit::target(&double, cfg(Duration::from_secs(10)));
        let core = target.core();
        for _ in 0..3 {
            core.abandon_owned(post(core, OwnedOp::receive_any(buf(&registry), 0..64)));
        }
        assert!(double.deliver(1, 8, WcStatus::SUCCESS));
        let first = core.flush_inbound();
        assert_eq!(
            (first.pool, first.pool_silent),
            (3, flush == SharedFlush::Silent)
        );
        start = Instant::now();
    }
    let took = start.elapsed();
    assert!(took < Duration::from_secs(1), "drop took {took:?}");
    // Reported: cancelled in the transport. Silent: left posted there,
    // never to be touched; the engine gave their buffers back once the
    // completion stream was quiet.
    let left = if flush == SharedFlush::Silent { 2 } else { 0 };
    assert_eq!(double.pooled(), left);
    assert_eq!(registry.stats().live_registrations, 0);
}

#[test]
fn pooled_receives_are_flushed_at_once_when_reported() {
    pooled_receives_at_drop(SharedFlush::Reported);
}

#[test]
fn pooled_receives_of_a_silent_pool_come_back_once_it_is_quiet() {
    pooled_receives_at_drop(SharedFlush::Silent);
}
