//! Key revocation when a UCX transport shuts down or closes an endpoint,
//! in one process over tcp and shared memory: a peer that leaves or closes
//! its endpoint says goodbye, so nobody waits for it; a registration that
//! outlives its transport was revoked as the transport shut down.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ferrovia_channel::transport::Transport;
use ferrovia_mr::RegisterOptions;
use ferrovia_types::WcClass;
use ferrovia_ucx::UcxTransport;

/// Rank 0 fetched rank 1's key, then shut its transport down: rank 1's
/// drop does not wait for it (shared memory cannot tell a peer is gone;
/// the peer says so itself).
fn a_peer_that_shut_down_does_not_delay_the_drop(tls: &str) {
    const BOUND: Duration = Duration::from_secs(20);
    let mut w = world_on(2, tls, || UcxTransport::builder().revocation_timeout(BOUND));
    let (b, _t_b) = w.pop().expect("rank 1");
    let (mut a, t_a) = w.pop().expect("rank 0");
    let exposed = buf(&b, &[1; 64], rw());
    let remote = exposed.registration().remote().unwrap();
    let src = buf(&a, &[2; 64], RegisterOptions::local());
    assert_eq!(write(&mut a, &src, remote), Ok(()));
    drop((src, a, t_a));
    let started = Instant::now();
    drop(exposed);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the drop waited for a peer that is gone: {:?}",
        started.elapsed()
    );
}

#[test]
fn a_peer_that_shut_down_does_not_delay_the_drop_over_tcp() {
    a_peer_that_shut_down_does_not_delay_the_drop("tcp");
}

#[test]
fn a_peer_that_shut_down_does_not_delay_the_drop_over_shared_memory() {
    a_peer_that_shut_down_does_not_delay_the_drop(SHARED_MEMORY);
}

/// Rank 0 fetched rank 1's key, then closed its endpoint to rank 1 (as a
/// scope's drain or a barrier timeout does): rank 1's drop does not wait
/// for it.
fn a_peer_that_closed_its_endpoint_does_not_delay_the_drop(tls: &str) {
    const BOUND: Duration = Duration::from_secs(20);
    let mut w = world_on(2, tls, || UcxTransport::builder().revocation_timeout(BOUND));
    let t_a = w[0].1.clone();
    let (a, b) = w.split_at_mut(1);
    let (a, b) = (&mut a[0].0, &mut b[0].0);
    let exposed = buf(b, &[1; 64], rw());
    let remote = exposed.registration().remote().unwrap();
    let src = buf(a, &[2; 64], RegisterOptions::local());
    assert_eq!(write(a, &src, remote), Ok(()));
    t_a.flush(1).unwrap();
    let started = Instant::now();
    drop(exposed);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the drop waited for a peer that closed its endpoint: {:?}",
        started.elapsed()
    );
}

#[test]
fn a_peer_that_closed_its_endpoint_does_not_delay_the_drop_over_tcp() {
    a_peer_that_closed_its_endpoint_does_not_delay_the_drop("tcp");
}

#[test]
fn a_peer_that_closed_its_endpoint_does_not_delay_the_drop_over_shared_memory() {
    a_peer_that_closed_its_endpoint_does_not_delay_the_drop(SHARED_MEMORY);
}

/// Rank 1's registration outlives its transport, then is dropped too: the
/// transport revoked the key as it shut down, so rank 0's write with the
/// old descriptor is refused (by the key, or by the closed endpoint) and
/// does not land.
fn a_key_is_revoked_when_its_transport_shuts_down(tls: &str) {
    let mut w = world_on(2, tls, UcxTransport::builder);
    let (b, t_b) = w.pop().expect("rank 1");
    let (mut a, _t_a) = w.pop().expect("rank 0");
    let live = buf(&a, &[0xee; 64], RegisterOptions::local());
    let stale = buf(&a, &[0x55; 64], RegisterOptions::local());
    let mut memory = vec![0u8; 64];
    {
        // SAFETY: the registration is dropped in this test, never leaked.
        let exposed = unsafe { b.registry().register_shared_slice(&mut memory, rw()) }.unwrap();
        let remote = exposed.registration().remote().unwrap();
        assert_eq!(write(&mut a, &live, remote), Ok(()));
        drop((b, t_b));
        drop(exposed);
        let outcome = write(&mut a, &stale, remote);
        assert!(
            matches!(
                outcome,
                Err(Some(WcClass::RemoteAccess | WcClass::RetryExceeded))
            ),
            "a write to a revoked key of a transport that is gone: {outcome:?}"
        );
    }
    assert!(
        memory.iter().all(|&x| x == 0xee),
        "the stale write landed: {memory:?}"
    );
}

#[test]
fn a_key_is_revoked_when_its_transport_shuts_down_over_tcp() {
    a_key_is_revoked_when_its_transport_shuts_down("tcp");
}

#[test]
fn a_key_is_revoked_when_its_transport_shuts_down_over_shared_memory() {
    a_key_is_revoked_when_its_transport_shuts_down(SHARED_MEMORY);
}
