//! Scope semantics on a device: manual scopes report unpolled work, handles
//! poll, full queues are a typed error after the operation timeout.

mod common;

use std::time::{Duration, Instant};

use common::{WAIT, buf, builder, pd};
use ferrovia_channel::{
    Gather, ReceiveWorkRequest, Scatter, ScopeError, SendWorkRequest, TransportError,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_verbs_transport::VerbsChannel;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn manual_scope_reports_unpolled_work_and_poll_finds_completions() {
    let pd = pd();
    let mut a = builder(&pd).build().unwrap();
    let mut b = builder(&pd).build().unwrap();
    let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
    a.connect(&eb).unwrap();
    b.connect(&ea).unwrap();
    let msg = buf(&a, b"manual", RegisterOptions::local());
    let mut inbox = buf(&b, &[0; 16], RegisterOptions::local());

    // Every request polled: a manual scope ends cleanly.
    b.manual_scope(|rx| {
        let mut r = rx.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
        a.send(&[Gather::of(&msg)?])?;
        let start = Instant::now();
        let done = loop {
            if let Some(done) = r.poll()? {
                break done;
            }
            assert!(start.elapsed() < WAIT, "poll never saw the completion");
        };
        assert_eq!(done.into_received().unwrap(), b"manual");
        Ok::<_, TransportError>(())
    })
    .unwrap();

    // A request left unpolled is still drained, then reported.
    let mut r = None;
    b.scope(|rx| {
        let got = rx.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
        r = Some(a.manual_scope(|tx| {
            let g = [Gather::of(&msg)?];
            let _dropped = tx.post_send(SendWorkRequest::new(&g)?)?;
            Ok::<_, TransportError>(())
        }));
        got.wait(WAIT)?;
        Ok::<_, TransportError>(())
    })
    .unwrap();
    match r.unwrap() {
        Err(ScopeError::Drain(d)) => assert_eq!(d.unpolled, 1, "{d}"),
        other => panic!("expected the unpolled send to be reported, got {other:?}"),
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_full_receive_queue_is_a_typed_error_after_the_operation_timeout() {
    let pd = pd();
    let timeout = Duration::from_millis(300);
    let mut a = builder(&pd)
        .recv_depth(4)
        .op_timeout(timeout)
        .drain_deadline(Duration::from_millis(200))
        .build()
        .unwrap();
    let b = builder(&pd).build().unwrap();
    a.connect(&b.endpoint().unwrap()).unwrap();
    let mut inbox = buf(&a, &[0; 64], RegisterOptions::local());
    let r = a.scope(|s| {
        let (bytes, reg) = inbox.split_mut();
        let mut chunks = bytes.chunks_mut(8);
        for _ in 0..4 {
            drop(s.post_receive(ReceiveWorkRequest::new(Scatter::new(
                reg,
                chunks.next().unwrap(),
            )?))?);
        }
        let start = Instant::now();
        let fifth = s.post_receive(ReceiveWorkRequest::new(Scatter::new(
            reg,
            chunks.next().unwrap(),
        )?));
        assert!(
            start.elapsed() >= timeout,
            "gave up after {:?}",
            start.elapsed()
        );
        match fifth {
            Err(TransportError::QueueFull { queue, depth, .. }) => {
                assert_eq!((queue, depth), ("receive", 4))
            }
            Err(other) => panic!("expected QueueFull, got {other}"),
            Ok(_) => panic!("a fifth receive fit a queue of 4"),
        }
        Ok::<_, TransportError>(())
    });
    // The four receives never match: flushed at the drain deadline.
    match r {
        Err(ScopeError::Drain(d)) => assert_eq!(d.flushed.len(), 4, "{d}"),
        other => panic!("expected the four receives flushed, got {other:?}"),
    }
}
