//! Connection generations (reliability issue, part 4): nothing of a
//! replaced or broken connection reaches the new one, over tcp and shared
//! memory. Before generations, a message sent before a reconnect was the
//! first one the new connection delivered, and every later one was
//! shifted by one.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ferrovia_channel::{
    Gather, MultiChannel, PeerReceiveWorkRequest, PeerSendWorkRequest, PeerWriteWorkRequest,
    ReceiveWorkRequest, Scatter, ScopeError, SendWorkRequest, TransportError, WriteWorkRequest,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_types::WcClass;
use ferrovia_ucx::UcxTransport;

/// Both sides renew and reconnect the connection between `a` (peer 0)
/// and `b` (peer 1), as `Node::reconnect` does.
fn reconnect(a: &mut MultiChannel, b: &mut MultiChannel) {
    let ours = a.renew(1).expect("renew a");
    let theirs = b.renew(0).expect("renew b");
    a.connect_renewed(1, &theirs).expect("reconnect a");
    b.connect_renewed(0, &ours).expect("reconnect b");
}

/// `from` sends `msg` to peer `to`, waiting for its completion.
fn send(from: &mut MultiChannel, to: usize, msg: &[u8]) -> Result<(), TransportError> {
    let m = buf(from, msg, RegisterOptions::local());
    from.scope(|s| {
        let g = [Gather::of(&m)?];
        s.post_send(PeerSendWorkRequest::new(to, SendWorkRequest::new(&g)?))?
            .wait(WAIT)
            .map(drop)
    })
    .map_err(|e| match e {
        ScopeError::Closure(e) => e,
        other => TransportError::Config(other.to_string()),
    })
}

/// One write of `src` to `dst` at peer `to`: Ok, or the completion's
/// class.
fn write_to(
    from: &mut MultiChannel,
    to: usize,
    src: &ferrovia_mr::RegisteredBuffer,
    dst: ferrovia_mr::RemoteMemoryRegion,
) -> Outcome {
    from.scope(|s| {
        let g = [Gather::of(src)?];
        s.post_write(PeerWriteWorkRequest::new(
            to,
            WriteWorkRequest::new(&g, dst)?,
        ))?
        .wait(WAIT)
        .map(drop)
    })
    .map_err(|e| {
        eprintln!("write: {e}");
        e.closure().and_then(class)
    })
}

/// The next message from peer `from`, waiting at most `wait`.
fn receive(on: &mut MultiChannel, from: usize, wait: Duration) -> Result<Vec<u8>, TransportError> {
    let mut inbox = buf(on, &[0; 64], RegisterOptions::local());
    on.scope(|s| {
        s.set_drain_deadline(Duration::from_millis(200));
        let d = s
            .post_receive(PeerReceiveWorkRequest::new(
                from,
                ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
            ))?
            .wait(wait)?;
        Ok(d.into_received().unwrap_or_default().to_vec())
    })
    .map_err(|e: ScopeError<TransportError>| match e {
        ScopeError::Closure(e) | ScopeError::Both { closure: e, .. } => e,
        other => TransportError::Config(other.to_string()),
    })
}

fn stale_messages_are_dropped_after_a_reconnect(tls: &str) {
    let mut w = world_on(2, tls, UcxTransport::builder);
    let (left, right) = w.split_at_mut(1);
    let ((a, ta), (b, _)) = (&mut left[0], &mut right[0]);
    for cycle in 0..5u64 {
        // Sent on the old connection before anyone receives it: it waits
        // in UCX's unexpected queue at `a` while both reconnect.
        send(b, 0, format!("STALE {cycle}").as_bytes()).expect("the stale send completes");
        reconnect(a, b);
        send(b, 0, format!("FRESH {cycle}").as_bytes()).expect("send on the new connection");
        let got = receive(a, 1, WAIT).expect("the new connection delivers");
        assert_eq!(
            String::from_utf8_lossy(&got[..7]),
            format!("FRESH {cycle}"),
            "cycle {cycle}: the first message after the reconnect is the new one"
        );
        let t = Instant::now();
        while ta.stale_messages() < cycle + 1 && t.elapsed() < WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(ta.stale_messages(), cycle + 1, "each stale message counted");
        assert_eq!(a.stale_dropped(), cycle + 1);
    }
    // And the new connection keeps order: three in a row.
    for i in 0..3u8 {
        send(b, 0, &[i; 4]).unwrap();
    }
    for i in 0..3u8 {
        assert_eq!(receive(a, 1, WAIT).unwrap()[..4], [i; 4]);
    }
}

#[test]
fn stale_messages_are_dropped_after_a_reconnect_over_tcp() {
    stale_messages_are_dropped_after_a_reconnect("tcp");
}

#[test]
fn stale_messages_are_dropped_after_a_reconnect_over_shared_memory() {
    stale_messages_are_dropped_after_a_reconnect(SHARED_MEMORY);
}

fn a_flushed_connection_breaks_at_the_peer_too(tls: &str) {
    let mut w = world_on(2, tls, UcxTransport::builder);
    let (left, right) = w.split_at_mut(1);
    let ((a, _), (b, _)) = (&mut left[0], &mut right[0]);
    let target = buf(a, &[0; 64], rw());
    let remote = target.registration().remote().unwrap();
    let src = buf(b, &[7; 8], RegisterOptions::local());
    assert_eq!(
        write_to(b, 0, &src, remote.sub_region(0, 8).unwrap()),
        Ok(())
    );
    // `a` flushes its connection to `b` at a drain deadline.
    let flushed = receive(a, 1, Duration::from_millis(100));
    assert!(flushed.is_err(), "nothing was sent: {flushed:?}");
    // `b` learns it: a receive from `a` fails soon, without any timeout.
    let t = Instant::now();
    let heard = receive(b, 0, Duration::from_secs(5));
    let waited = t.elapsed();
    println!("{tls}: the peer's side broke {waited:?} after the flush: {heard:?}");
    assert!(heard.is_err(), "{heard:?}");
    assert!(waited < Duration::from_secs(4), "{waited:?}");
    // Its writes and sends fail from now on instead of landing.
    let wrote = write_to(b, 0, &src, remote.sub_region(8, 8).unwrap());
    assert!(
        matches!(
            wrote,
            Err(Some(WcClass::Flushed | WcClass::RetryExceeded)) | Err(None)
        ),
        "{wrote:?}"
    );
    assert!(send(b, 0, b"LATE").is_err());
    assert_eq!(target.to_vec()[8..16], [0; 8], "no late write landed");
    // A reconnect brings both back.
    reconnect(a, b);
    assert_eq!(
        write_to(b, 0, &src, remote.sub_region(8, 8).unwrap()),
        Ok(())
    );
    send(b, 0, b"AFTER").unwrap();
    assert_eq!(&receive(a, 1, WAIT).unwrap()[..5], b"AFTER");
    assert_eq!(target.to_vec()[8..16], [7; 8]);
}

#[test]
fn a_flushed_connection_breaks_at_the_peer_too_over_tcp() {
    a_flushed_connection_breaks_at_the_peer_too("tcp");
}

#[test]
fn a_flushed_connection_breaks_at_the_peer_too_over_shared_memory() {
    a_flushed_connection_breaks_at_the_peer_too(SHARED_MEMORY);
}
