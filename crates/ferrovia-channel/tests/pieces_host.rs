//! Pieces on the host through transport doubles: runs posted in a scope
//! and owned, one ticket a run, errors with their tags, what is refused
//! before anything is posted, the owned lease held until the device is
//! done, and rails as one transport.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use ferrovia_channel::engine::run_scope;
use ferrovia_channel::transport::{OpKind, Transport};
use ferrovia_channel::{
    ChannelConfig, Lease, PieceState, Pieces, Rails, ScopeTarget, TransportError, Unpolled,
};
use ferrovia_mr::{RegisterOptions, RemoteMemoryRegion};
use ferrovia_testkit::{Double, Mode};
use ferrovia_types::{AccessFlags, WcStatus};

fn cfg() -> ChannelConfig {
    let mut cfg = ChannelConfig::default();
    cfg.drain_deadline = Duration::from_millis(50);
    cfg.op_timeout = Duration::from_millis(200);
    cfg
}

/// `n` pieces of 64 bytes for each of `peers` peers over `buf`'s
/// registration, tagged `peer * 1000 + i`.
fn pieces<'a>(
    reg: &ferrovia_mr::Registration<'a>,
    peers: usize,
    n: usize,
    remote: RemoteMemoryRegion,
) -> Pieces<'a> {
    let mut p = Pieces::new(reg, peers);
    for peer in 0..peers {
        for i in 0..n {
            let r = remote.sub_region((i * 64) as u64, 64).unwrap();
            p.push(peer, i * 64..(i + 1) * 64, r, (peer * 1000 + i) as u32)
                .unwrap();
        }
    }
    p
}

#[test]
fn runs_post_in_a_scope_with_one_ticket_each() {
    let double = Double::new(2, 64, Mode::Instant);
    let target = ferrovia_testkit::target(&double, cfg());
    let registry = ferrovia_testkit::registry();
    let mut buf = registry.alloc(64 * 40, RegisterOptions::local()).unwrap();
    let remote = RemoteMemoryRegion::new(0x10_0000, 64 * 40, 9).unwrap();
    let reg = buf.registration().clone();
    let p = pieces(&reg, 2, 40, remote);
    assert_eq!((p.len(), p.peer_len(1)), (80, 40));
    let lease = Lease::exclusive(&mut buf);
    run_scope(&target, Unpolled::Drain, |s| {
        let core = s.target().core();
        let a = s.post_pieces(&p, 0, 0..40, OpKind::Write, &lease)?;
        let b = s.post_pieces(&p, 1, 0..17, OpKind::Read, &lease)?;
        s.progress()?;
        assert_eq!(core.poll_piece(a), PieceState::Done);
        assert_eq!(core.poll_piece(b), PieceState::Done);
        assert_eq!(core.poll_piece(a), PieceState::Gone, "a ticket is used up");
        Ok::<_, TransportError>(())
    })
    .unwrap();
    assert_eq!(double.posted.load(Relaxed), 57);
}

#[test]
fn what_is_wrong_is_refused_before_anything_is_posted() {
    let double = Double::new(1, 64, Mode::Instant);
    let target = ferrovia_testkit::target(&double, cfg());
    let registry = ferrovia_testkit::registry();
    let buf = registry.alloc(4096, RegisterOptions::local()).unwrap();
    let other = registry.alloc(4096, RegisterOptions::local()).unwrap();
    let reg = buf.registration().clone();
    let read_only = RemoteMemoryRegion::new(0x1000, 4096, 3)
        .unwrap()
        .restrict(AccessFlags::REMOTE_READ);
    let mut p = Pieces::new(&reg, 1);
    // Checked when pushed: the local range, the remote length, the peer.
    assert!(p.push(0, 4000..4100, read_only, 0).is_err());
    assert!(matches!(
        p.push(0, 0..128, read_only.sub_region(0, 64).unwrap(), 0),
        Err(TransportError::RemoteTooSmall { .. })
    ));
    assert!(matches!(
        p.push(3, 0..64, read_only, 0),
        Err(TransportError::NoSuchPeer { peer: 3, count: 1 })
    ));
    p.push(0, 0..64, read_only, 7).unwrap();
    let shared = Lease::shared(&buf);
    let elsewhere = Lease::shared(&other);
    run_scope(&target, Unpolled::Drain, |s| {
        // A write to a region that grants no remote write.
        assert!(matches!(
            s.post_pieces(&p, 0, 0..1, OpKind::Write, &shared),
            Err(TransportError::RemoteAccessDenied { .. })
        ));
        // A read into bytes only shared with the program.
        assert!(s.post_pieces(&p, 0, 0..1, OpKind::Read, &shared).is_err());
        // Pieces outside the lease, a range beyond the peer's, an op kind
        // that is not one-sided.
        assert!(
            s.post_pieces(&p, 0, 0..1, OpKind::Write, &elsewhere)
                .is_err()
        );
        assert!(s.post_pieces(&p, 0, 0..2, OpKind::Write, &shared).is_err());
        assert!(s.post_pieces(&p, 0, 0..1, OpKind::Send, &shared).is_err());
        Ok::<_, TransportError>(())
    })
    .unwrap();
    assert_eq!(double.posted.load(Relaxed), 0);
}

#[test]
fn a_failed_piece_is_named_by_its_tag() {
    let double = Double::new(1, 64, Mode::Held);
    let target = ferrovia_testkit::target(&double, cfg());
    let core = target.core();
    let registry = ferrovia_testkit::registry();
    let buf = registry.alloc(64 * 20, RegisterOptions::local()).unwrap();
    let reg = buf.registration().clone();
    let p = pieces(&reg, 1, 20, RemoteMemoryRegion::new(0, 64 * 20, 5).unwrap());
    let lease = Arc::new(Lease::owning(buf));
    let t = core
        .post_pieces_owned(&p, 0, 0..20, OpKind::Write, &lease)
        .unwrap();
    // The first chunk of 16 and the last of 4 each hold the lease.
    assert_eq!(Arc::strong_count(&lease), 3);
    double.fail_one(0); // piece 0, unsignalled
    double.complete_all();
    core.progress().unwrap();
    assert_eq!(core.poll_piece(t), PieceState::Done);
    let mut errors = Vec::new();
    assert_eq!(core.take_piece_errors(&mut errors), 0);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].tag, 0);
    assert_eq!(errors[0].run, t.run());
    assert_eq!(errors[0].error.status, WcStatus::RETRY_EXC_ERR);
    assert_eq!(
        Arc::strong_count(&lease),
        1,
        "the device is done: the runs let go"
    );
    assert!(Lease::try_unwrap(lease).unwrap().is_some());
}

#[test]
fn an_error_names_its_run_so_a_later_run_of_the_same_pieces_is_not_blamed() {
    let double = Double::new(1, 64, Mode::Held);
    let target = ferrovia_testkit::target(&double, cfg());
    let core = target.core();
    let registry = ferrovia_testkit::registry();
    let buf = registry.alloc(64 * 20, RegisterOptions::local()).unwrap();
    let reg = buf.registration().clone();
    let p = pieces(&reg, 1, 20, RemoteMemoryRegion::new(0, 64 * 20, 5).unwrap());
    let lease = Arc::new(Lease::owning(buf));
    // The first run given up on, the second posted before the first's
    // error comes: each error names its own run, so the second's owner
    // does not take the first's for its own.
    let given_up = core
        .post_pieces_owned(&p, 0, 0..20, OpKind::Write, &lease)
        .unwrap();
    core.abandon_piece(given_up);
    let again = core
        .post_pieces_owned(&p, 0, 0..20, OpKind::Write, &lease)
        .unwrap();
    assert_ne!(given_up.run(), again.run());
    double.fail_one(0); // the first run's piece 0
    double.complete_all();
    core.progress().unwrap();
    let mut errors = Vec::new();
    core.take_piece_errors(&mut errors);
    assert_eq!(errors.len(), 1);
    assert_eq!((errors[0].tag, errors[0].run), (0, given_up.run()));
    // The double completes the later run as it stands.
    assert_eq!(core.poll_piece(again), PieceState::Done);
}

#[test]
fn an_owned_run_keeps_its_lease_whoever_gives_up_on_it() {
    let double = Double::new(1, 64, Mode::Held);
    let target = ferrovia_testkit::target(&double, cfg());
    let core = target.core();
    let registry = ferrovia_testkit::registry();
    let buf = registry.alloc(64 * 8, RegisterOptions::local()).unwrap();
    let reg = buf.registration().clone();
    let p = pieces(&reg, 1, 8, RemoteMemoryRegion::new(0, 64 * 8, 5).unwrap());
    let lease = Arc::new(Lease::owning(buf));
    let t = core
        .post_pieces_owned(&p, 0, 0..8, OpKind::Read, &lease)
        .unwrap();
    core.abandon_piece(t);
    let lease = match Lease::try_unwrap(lease) {
        Err(still) => still,
        Ok(_) => panic!("the bytes came back while the device may write them"),
    };
    double.complete_all();
    core.progress().unwrap();
    assert_eq!(Arc::strong_count(&lease), 1);
    // Forgotten tickets: the engine's drop flushes the run and lets go.
    let t = core
        .post_pieces_owned(&p, 0, 0..8, OpKind::Write, &lease)
        .unwrap();
    let _never_polled = t;
    assert_eq!(Arc::strong_count(&lease), 2);
    drop(target);
    assert_eq!(Arc::strong_count(&lease), 1);
}

#[test]
fn owned_pieces_need_a_lease_that_keeps_their_keys() {
    let double = Double::new(1, 64, Mode::Instant);
    let target = ferrovia_testkit::target(&double, cfg());
    let core = target.core();
    let (rail0, rail1) = (ferrovia_testkit::registry(), ferrovia_testkit::registry());
    let buf = rail0.alloc(64 * 4, RegisterOptions::local()).unwrap();
    let alias = rail1
        .register_alias(&buf, RegisterOptions::local())
        .unwrap();
    let p = pieces(&alias, 1, 4, RemoteMemoryRegion::new(0, 256, 5).unwrap());
    let without = Arc::new(Lease::owning(buf));
    assert!(
        core.post_pieces_owned(&p, 0, 0..4, OpKind::Write, &without)
            .is_err()
    );
    let buf = Lease::try_unwrap(without).unwrap().unwrap();
    let with = Arc::new(Lease::owning_with(buf, vec![alias.clone()]));
    let t = core
        .post_pieces_owned(&p, 0, 0..4, OpKind::Write, &with)
        .unwrap();
    core.progress().unwrap();
    assert_eq!(core.poll_piece(t), PieceState::Done);
    assert_eq!(double.posted.load(Relaxed), 4);
}

#[test]
fn rails_are_one_transport_over_several() {
    let (r0, r1) = (
        Double::new(2, 64, Mode::Instant),
        Double::new(2, 64, Mode::Instant),
    );
    let rails = Arc::new(Rails::new(vec![r0.clone(), r1.clone()]).unwrap());
    assert_eq!(
        (rails.peers(), rails.rails(), rails.peer_of(1, 1)),
        (4, 2, 3)
    );
    let target = ferrovia_testkit::target(&rails, cfg());
    let registry = ferrovia_testkit::registry();
    let mut buf = registry.alloc(64 * 10, RegisterOptions::local()).unwrap();
    let reg = buf.registration().clone();
    let p = pieces(&reg, 4, 10, RemoteMemoryRegion::new(0, 64 * 10, 5).unwrap());
    let lease = Lease::exclusive(&mut buf);
    run_scope(&target, Unpolled::Drain, |s| {
        let core = s.target().core();
        let tickets: Vec<_> = (0..4)
            .map(|peer| s.post_pieces(&p, peer, 0..10, OpKind::Write, &lease))
            .collect::<Result<_, _>>()?;
        s.progress()?;
        for t in tickets {
            assert_eq!(core.poll_piece(t), PieceState::Done);
        }
        Ok::<_, TransportError>(())
    })
    .unwrap();
    assert_eq!((r0.posted.load(Relaxed), r1.posted.load(Relaxed)), (20, 20));
    assert!(Rails::new(vec![r0, Double::new(3, 64, Mode::Instant)]).is_err());
    let none: Vec<Arc<dyn Transport>> = Vec::new();
    assert!(Rails::new(none).is_err());
}
