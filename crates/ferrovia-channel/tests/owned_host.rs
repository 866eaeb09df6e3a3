//! Owned requests on the host through a transport double: the engine keeps
//! a buffer until the completion whoever gave up on it, a full queue hands
//! the request back and wakes its waiter, given-up requests are flushed
//! past their deadline, and dropping the engine settles what is left.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::task::{Wake, Waker};
use std::time::Duration;

use ferrovia_channel::engine::{ChannelCore, OwnedOp, OwnedPoll, OwnedTicket, Refused};
use ferrovia_channel::{ChannelConfig, OwnedBuf, Returned, ScopeTarget, TransportError};
use ferrovia_mr::{MrRegistry, RegisterOptions, RegisteredBuffer, RemoteMemoryRegion};
use ferrovia_testkit::{Double, Mode};
use ferrovia_types::WcStatus;

struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn waker() -> (Arc<Count>, Waker) {
    let c = Arc::new(Count(AtomicUsize::new(0)));
    (c.clone(), Waker::from(c))
}

fn cfg() -> ChannelConfig {
    let mut cfg = ChannelConfig::default();
    cfg.drain_deadline = Duration::from_millis(50);
    cfg.op_timeout = Duration::from_millis(100);
    cfg
}

fn buf(registry: &MrRegistry, fill: u8) -> RegisteredBuffer {
    registry
        .register_buffer(vec![fill; 64], RegisterOptions::local())
        .unwrap()
}

fn post(core: &ChannelCore, op: OwnedOp, w: &Waker) -> OwnedTicket {
    match core.try_post_owned(op, Some(w)) {
        Ok(t) => t,
        Err(e) => panic!("refused: {e:?}"),
    }
}

#[test]
fn a_completed_request_wakes_its_waker_and_hands_its_buffer_back() {
    let double = Double::new(2, 8, Mode::Held);
    let target = ferrovia_testkit::target(&double, cfg());
    let core = target.core();
    let registry = ferrovia_testkit::registry();
    let (count, w) = waker();
    let t = post(core, OwnedOp::receive(1, buf(&registry, 7), 0..64), &w);
    let t = match core.poll_owned(t, &w) {
        OwnedPoll::Pending(t) => t,
        other => panic!("completed before the transport said so: {other:?}"),
    };
    assert_eq!(core.outstanding(), 1);
    double.complete_all();
    assert_eq!(core.progress().unwrap(), 1);
    assert_eq!(count.0.load(SeqCst), 1, "the waker is woken by routing");
    match core.poll_owned(t, &w) {
        OwnedPoll::Ready(c, OwnedBuf::Plain(b)) => {
            assert_eq!(c.status, WcStatus::SUCCESS);
            assert_eq!(c.peer, Some(1));
            assert_eq!(b[0], 7);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(core.outstanding(), 0);
}

#[test]
fn a_request_given_up_on_keeps_its_buffer_until_its_completion() {
    let double = Double::new(1, 8, Mode::Held);
    let target = ferrovia_testkit::target(&double, cfg());
    let core = target.core();
    let registry = ferrovia_testkit::registry();
    let (_, w) = waker();
    let t = post(core, OwnedOp::receive(0, buf(&registry, 1), 0..64), &w);
    core.abandon_owned(t);
    core.progress().unwrap();
    let mut back: Vec<Returned> = Vec::new();
    core.take_returned(&mut back);
    assert!(back.is_empty(), "handed back before the completion");
    assert_eq!(
        registry.stats().live_registrations,
        1,
        "the engine still holds the buffer's registration"
    );
    double.complete_all();
    core.progress().unwrap();
    core.take_returned(&mut back);
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].completion.status, WcStatus::SUCCESS);
    drop(back);
    assert_eq!(registry.stats().live_registrations, 0);
}

#[test]
fn a_full_queue_hands_the_request_back_and_wakes_its_waiter_when_room_frees() {
    let double = Double::new(1, 2, Mode::Held);
    let target = ferrovia_testkit::target(&double, cfg());
    let core = target.core();
    let registry = ferrovia_testkit::registry();
    let (_, w) = waker();
    let a = post(
        core,
        OwnedOp::send(0, OwnedBuf::Plain(buf(&registry, 1)), 0..8),
        &w,
    );
    let b = post(
        core,
        OwnedOp::send(0, OwnedBuf::Plain(buf(&registry, 2)), 0..8),
        &w,
    );
    let (room, rw) = waker();
    let op = match core.try_post_owned(
        OwnedOp::send(0, OwnedBuf::Plain(buf(&registry, 3)), 0..8),
        Some(&rw),
    ) {
        Err(Refused::Full(op)) => op,
        other => panic!("expected a full queue: {other:?}"),
    };
    assert_eq!(op.peer(), Some(0));
    double.complete_all();
    core.progress().unwrap();
    assert!(room.0.load(SeqCst) >= 1, "the waiter for room is woken");
    let c = post(core, op, &w);
    double.complete_all();
    core.progress().unwrap();
    for t in [a, b, c] {
        assert!(matches!(core.poll_owned(t, &w), OwnedPoll::Ready(..)));
    }
}

#[test]
fn bad_requests_are_refused_with_their_buffer() {
    let double = Double::new(1, 2, Mode::Held);
    let target = ferrovia_testkit::target(&double, cfg());
    let core = target.core();
    let registry = ferrovia_testkit::registry();
    let shared = Arc::new(
        registry
            .alloc(64, RegisterOptions::local().allow_remote_write())
            .unwrap(),
    );
    let remote: RemoteMemoryRegion = shared.registration().remote().unwrap();
    let cases = [
        OwnedOp::send(0, OwnedBuf::Plain(buf(&registry, 0)), 0..65),
        OwnedOp::send(3, OwnedBuf::Plain(buf(&registry, 0)), 0..8),
        OwnedOp::write(
            0,
            OwnedBuf::Plain(buf(&registry, 0)),
            0..64,
            remote.sub_region(0, 8).unwrap(),
        ),
        OwnedOp::atomic(
            0,
            buf(&registry, 0),
            0..8,
            remote,
            ferrovia_channel::AtomicOp::FetchAdd { add: 1 },
        ),
    ];
    for op in cases {
        match core.try_post_owned(op, None) {
            Err(Refused::Failed(e, b)) => {
                assert_eq!(b.len(), 64, "{e}");
            }
            other => panic!("accepted: {other:?}"),
        }
    }
    // An Arc'd buffer is a source, sent while the program reads it too.
    let (_, w) = waker();
    let t = post(
        core,
        OwnedOp::send(0, OwnedBuf::PeerWritableArc(shared.clone()), 0..8),
        &w,
    );
    assert_eq!(shared.load_u64(0).unwrap(), 0);
    double.complete_all();
    core.progress().unwrap();
    assert!(matches!(core.poll_owned(t, &w), OwnedPoll::Ready(..)));
    assert_eq!(Arc::strong_count(&shared), 1);
}

#[test]
fn a_request_given_up_on_past_its_deadline_has_its_peer_flushed() {
    let double = Double::new(2, 8, Mode::Held);
    let target = ferrovia_testkit::target(&double, cfg());
    let core = target.core();
    let registry = ferrovia_testkit::registry();
    let (_, w) = waker();
    let t = post(core, OwnedOp::receive(1, buf(&registry, 0), 0..64), &w);
    core.abandon_owned(t);
    let left = core.flush_abandoned(Duration::from_millis(20));
    assert!(left.is_some_and(|d| d <= Duration::from_millis(20)));
    std::thread::sleep(Duration::from_millis(25));
    assert_eq!(core.flush_abandoned(Duration::from_millis(20)), None);
    assert!(core.is_broken(1) && !core.is_broken(0));
    core.progress().unwrap();
    let mut back = Vec::new();
    core.take_returned(&mut back);
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].completion.status, WcStatus::WR_FLUSH_ERR);
    assert_eq!(back[0].completion.peer, Some(1));
    match core.try_post_owned(OwnedOp::receive(1, buf(&registry, 0), 0..64), None) {
        Err(Refused::Failed(TransportError::Broken { peer: 1 }, _)) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn dropping_the_engine_settles_outstanding_and_forgotten_requests() {
    let double = Double::new(1, 8, Mode::Held);
    let registry = ferrovia_testkit::registry();
    {
        let target = ferrovia_testkit::target(&double, cfg());
        let core = target.core();
        let (_, w) = waker();
        let t = post(core, OwnedOp::receive(0, buf(&registry, 0), 0..64), &w);
        let _never_polled = t; // a ticket nobody polls nor gives up on
        let t = post(
            core,
            OwnedOp::send(0, OwnedBuf::Plain(buf(&registry, 0)), 0..8),
            &w,
        );
        core.abandon_owned(t);
        assert_eq!(registry.stats().live_registrations, 2);
    }
    assert_eq!(double.flushes.load(SeqCst), 1, "flushed past the deadline");
    assert_eq!(
        registry.stats().live_registrations,
        0,
        "flushed buffers are freed after their flush completions"
    );
}

#[test]
fn a_list_posts_in_chunks_with_one_signal_each_and_every_request_completes() {
    let double = Double::new(2, 64, Mode::Held);
    let target = ferrovia_testkit::target(&double, cfg());
    let core = target.core();
    let registry = ferrovia_testkit::registry();
    let src = Arc::new(buf(&registry, 5));
    let remote = RemoteMemoryRegion::new(0x1000, 64, 9).unwrap();
    let (count, w) = waker();
    let ops = (0..20).map(|i| {
        let peer = usize::from(i >= 18);
        OwnedOp::write(peer, OwnedBuf::PlainArc(src.clone()), 0..8, remote)
    });
    let posted = core.try_post_owned_list(ops, Some(&w));
    assert_eq!(posted.len(), 20);
    let tickets: Vec<OwnedTicket> = posted
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("refused: {e:?}")))
        .collect();
    assert_eq!(double.posted.load(SeqCst), 20);
    assert_eq!(core.outstanding(), 20);
    double.complete_all();
    core.progress().unwrap();
    assert_eq!(
        core.outstanding(),
        0,
        "a signalled completion completes its chunk"
    );
    assert!(count.0.load(SeqCst) >= 1);
    for t in tickets {
        match core.poll_owned(t, &w) {
            OwnedPoll::Ready(c, _) => assert_eq!(c.status, WcStatus::SUCCESS),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(Arc::strong_count(&src), 1);
}

#[test]
fn an_owned_receive_from_the_pool_names_its_sender() {
    use ferrovia_testkit::PoolDouble;
    let double = PoolDouble::new(4, 2, ferrovia_channel::transport::SharedFlush::Reported);
    let target = ferrovia_testkit::target(&double, cfg());
    let core = target.core();
    let registry = ferrovia_testkit::registry();
    let (count, w) = waker();
    let op = OwnedOp::receive_any(buf(&registry, 1), 0..64);
    assert_eq!(op.peer(), None);
    let first = post(core, op, &w);
    let second = post(core, OwnedOp::receive_any(buf(&registry, 2), 0..64), &w);
    // The pool holds two: a third waits for room.
    match core.try_post_owned(OwnedOp::receive_any(buf(&registry, 3), 0..64), Some(&w)) {
        Err(Refused::Full(op)) => assert_eq!(op.peer(), None),
        other => panic!("{other:?}"),
    }
    assert!(double.deliver(3, 5, WcStatus::SUCCESS));
    assert!(double.deliver(1, 64, WcStatus::SUCCESS));
    core.progress().unwrap();
    assert!(count.0.load(SeqCst) >= 2);
    for (t, sender, len, fill) in [(first, 3, 5, 1), (second, 1, 64, 2)] {
        match core.poll_owned(t, &w) {
            OwnedPoll::Ready(c, OwnedBuf::Plain(b)) => {
                assert_eq!((c.peer, c.byte_len), (Some(sender), len));
                assert_eq!(b[0], fill, "its own buffer back");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(core.outstanding(), 0);
}

#[test]
fn an_owned_receive_from_the_pool_needs_a_pool() {
    let double = Double::new(2, 8, Mode::Held);
    let target = ferrovia_testkit::target(&double, cfg());
    let core = target.core();
    let registry = ferrovia_testkit::registry();
    match core.try_post_owned(OwnedOp::receive_any(buf(&registry, 9), 0..64), None) {
        Err(Refused::Failed(TransportError::NoSharedPool, OwnedBuf::Plain(b))) => {
            assert_eq!(b[0], 9)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(double.posted.load(SeqCst), 0);
}
