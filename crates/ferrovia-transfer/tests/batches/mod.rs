//! The transfer layer's scenarios, run by `ucx_batches` (shared memory,
//! UCX's default for a one-host job) and `ucx_tcp_batches` (tcp, with
//! peer failure detection): two ranks as threads, each a `Node`, two
//! rails each.
#![allow(dead_code, unreachable_pub)]

use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use ferrovia_mr::{RegisterOptions, Shared};
use ferrovia_node::{Backend, Node, RailSpec};
use ferrovia_transfer::{
    DescriptorList, Op, RemoteSegment, Segment, TransferEngine, TransferError, target_options,
};

use crate::common::{T, job, pattern};

pub const BLOCK: usize = 64 << 10;
pub const BLOCKS: usize = 64;
/// Untouched bytes before and after the blocks in a target segment.
pub const MARGIN: usize = 4096;
pub const CANARY: u8 = 0xEE;

/// A rank's engine (two rails), its target segment (canaries in the
/// margins) and every rank's target, exchanged.
pub fn setup(node: &mut Node) -> (TransferEngine, Segment<Shared>, Vec<RemoteSegment>) {
    let engine = TransferEngine::builder()
        .rails(rails_for(node))
        .timeout(T)
        .open(node)
        .expect("engine");
    let target = engine
        .alloc(2 * MARGIN + BLOCKS * BLOCK, target_options())
        .expect("target");
    target
        .buffer()
        .write_from(0, &vec![CANARY; 2 * MARGIN + BLOCKS * BLOCK])
        .unwrap();
    let remotes = engine
        .all_gather(node, &target.remote().unwrap(), T)
        .expect("exchange");
    (engine, target, remotes)
}

/// Two rails: on verbs, the VM's two devices when it has them
/// (`FERROVIA_DEVICE`, default rxe0, and `SOFTROCE_DEV1`); else two
/// rails on the node's own backend (UCX workers, or QPs on one device).
pub fn rails_for(node: &Node) -> Vec<RailSpec> {
    match (node.backend(), std::env::var("SOFTROCE_DEV1")) {
        (Backend::Verbs, Ok(second)) if !second.is_empty() => vec![
            RailSpec::Device(std::env::var("FERROVIA_DEVICE").unwrap_or_else(|_| "rxe0".into())),
            RailSpec::Device(second),
        ],
        _ => vec![RailSpec::Same; 2],
    }
}

/// Entries: block `b` of the source to `peer`'s target at MARGIN + b × BLOCK.
pub fn blocks_to(peer: usize) -> DescriptorList {
    let mut l = DescriptorList::with_capacity(BLOCKS);
    for b in 0..BLOCKS {
        l.push(
            b * BLOCK..(b + 1) * BLOCK,
            peer,
            (MARGIN + b * BLOCK) as u64,
        );
    }
    l
}

/// Whether `target`'s margins are untouched (no byte landed outside the
/// entries' remote ranges).
pub fn check_margins(target: &Segment<Shared>) {
    let all = target.buffer().to_vec();
    assert!(
        all[..MARGIN].iter().all(|&b| b == CANARY),
        "a byte before the blocks changed"
    );
    assert!(
        all[MARGIN + BLOCKS * BLOCK..].iter().all(|&b| b == CANARY),
        "a byte after the blocks changed"
    );
}

/// Whether `target` holds `from`'s blocks, margins untouched.
pub fn check_target(target: &Segment<Shared>, from: usize) {
    let all = target.buffer().to_vec();
    assert!(
        all[..MARGIN].iter().all(|&b| b == CANARY),
        "a byte before the blocks changed"
    );
    assert!(
        all[MARGIN + BLOCKS * BLOCK..].iter().all(|&b| b == CANARY),
        "a byte after the blocks changed"
    );
    for b in 0..BLOCKS {
        let block = &all[MARGIN + b * BLOCK..MARGIN + (b + 1) * BLOCK];
        for (i, &v) in block.iter().enumerate().step_by(97) {
            assert_eq!(v, pattern(from, b, i), "block {b} byte {i}");
        }
    }
}

/// Two ranks; rank 0 writes its blocks into rank 1's target over both
/// rails in a scope, with a notification; rank 1 waits for it and checks
/// every block and the canaries; then rank 0 reads them back.
pub fn write_read_and_notify_over_two_rails() {
    let out = job(2, |rank, mut node| {
        let (engine, target, remotes) = setup(&mut node);
        if rank == 0 {
            let mut src = filled(&engine, 0);
            let prepared = engine.prepare(&src, &blocks_to(1), &remotes).unwrap();
            assert_eq!((prepared.entries(), prepared.slices()), (BLOCKS, BLOCKS));
            let lease = src.lease_mut();
            let report = engine
                .scope(|s| {
                    s.submit(&prepared, &lease, Op::Write, Some(b"ready"))?
                        .wait(T)
                })
                .unwrap();
            drop(lease);
            println!("write: {report:?}");
            assert_eq!(report.bytes, (BLOCKS * BLOCK) as u64);
            assert_eq!(report.notified, 1);
            assert!(report.rails_lost.is_empty());
            assert!(
                report.bytes_per_rail[..2].iter().all(|&b| b > 0),
                "both rails carried some: {report:?}"
            );
            // Read them back into a zeroed segment.
            let mut back = engine
                .alloc(BLOCKS * BLOCK, RegisterOptions::local())
                .unwrap();
            let reads = engine.prepare(&back, &blocks_to(1), &remotes).unwrap();
            let lease = back.lease_mut();
            engine
                .scope(|s| s.submit(&reads, &lease, Op::Read, None)?.wait(T))
                .unwrap();
            drop(lease);
            assert_eq!(back.bytes(), src.bytes(), "read back what was written");
            // Into Shared memory too, lent shared: nothing in Rust holds a
            // reference to it for the device to break.
            let shared = engine.alloc(BLOCKS * BLOCK, target_options()).unwrap();
            let reads = engine.prepare(&shared, &blocks_to(1), &remotes).unwrap();
            let lease = shared.lease();
            engine
                .scope(|s| s.submit(&reads, &lease, Op::Read, None)?.wait(T))
                .unwrap();
            assert_eq!(
                shared.buffer().to_vec(),
                src.bytes(),
                "read into Shared memory"
            );
        } else {
            let n = engine.wait_notification(T).unwrap();
            assert_eq!((n.peer, &n.data[..]), (0, &b"ready"[..]));
            check_target(&target, 0);
        }
        node.barrier(&[0, 1], T).unwrap();
        rank
    });
    assert_eq!(out, [0, 1]);
}

/// A source segment of `rank`'s pattern.
pub fn filled(engine: &TransferEngine, rank: usize) -> Segment {
    let mut seg = engine
        .alloc(BLOCKS * BLOCK, RegisterOptions::local())
        .expect("source");
    let bytes = seg.bytes_mut();
    for b in 0..BLOCKS {
        for i in 0..BLOCK {
            bytes[b * BLOCK + i] = pattern(rank, b, i);
        }
    }
    seg
}

/// Every bad input is a typed error before anything is posted.
pub fn bad_input_is_typed() {
    job(2, |rank, mut node| {
        let (engine, _target, remotes) = setup(&mut node);
        if rank == 0 {
            let src = filled(&engine, 0);
            let mut l = DescriptorList::new();
            l.push(BLOCKS * BLOCK - 10..BLOCKS * BLOCK + 10, 1, 0);
            assert!(matches!(
                engine.prepare(&src, &l, &remotes),
                Err(TransferError::LocalOutOfRange { entry: 0, .. })
            ));
            let mut l = DescriptorList::new();
            l.push(0..10, 1, 0);
            l.push(0..BLOCK, 1, (2 * MARGIN + BLOCKS * BLOCK) as u64 - 10);
            assert!(matches!(
                engine.prepare(&src, &l, &remotes),
                Err(TransferError::RemoteOutOfRange {
                    entry: 1,
                    peer: 1,
                    ..
                })
            ));
            let mut l = DescriptorList::new();
            l.push(0..10, 7, 0);
            assert!(matches!(
                engine.prepare(&src, &l, &remotes),
                Err(TransferError::UnknownPeer {
                    entry: 0,
                    peer: 7,
                    ..
                })
            ));
            let mut l = DescriptorList::new();
            l.push(5..5, 1, 0);
            assert!(matches!(
                engine.prepare(&src, &l, &remotes),
                Err(TransferError::EmptyEntry { entry: 0 })
            ));
            assert!(matches!(
                engine.prepare(&src, &DescriptorList::new(), &remotes),
                Err(TransferError::EmptyList)
            ));
            // A peer's segment that grants no remote read: reads refused.
            let write_only: Vec<RemoteSegment> = remotes
                .iter()
                .map(|r| {
                    RemoteSegment::new(
                        (0..r.rails())
                            .map(|i| {
                                r.rail(i)
                                    .unwrap()
                                    .restrict(ferrovia_types::AccessFlags::REMOTE_WRITE)
                            })
                            .collect(),
                    )
                    .unwrap()
                })
                .collect();
            let prepared = engine.prepare(&src, &blocks_to(1), &write_only).unwrap();
            let lease = src.lease();
            engine
                .scope(|s| {
                    assert!(matches!(
                        s.submit(&prepared, &lease, Op::Read, None),
                        Err(TransferError::MissingRight {
                            entry: 0,
                            peer: 1,
                            right: "REMOTE_READ",
                            ..
                        })
                    ));
                    assert!(matches!(
                        s.submit(&prepared, &lease, Op::Write, Some(&[0; 65])),
                        Err(TransferError::NotificationTooLong { len: 65, max: 64 })
                    ));
                    Ok(())
                })
                .unwrap();
            // Rails and peers out of range.
            assert!(matches!(
                engine.break_rail(2, 1),
                Err(TransferError::NoSuchRail {
                    rail: 2,
                    rails: 2,
                    ..
                })
            ));
            assert!(matches!(
                engine.break_rail(0, 9),
                Err(TransferError::NoSuchRail {
                    peer: 9,
                    peers: 2,
                    ..
                })
            ));
            // A lease of other bytes than the list was prepared on.
            let mut other = filled(&engine, 0);
            let elsewhere = other.lease_mut();
            engine
                .scope(|s| {
                    let r = s.submit(&prepared, &elsewhere, Op::Write, None);
                    assert!(matches!(r, Err(TransferError::LeaseMismatch)), "{r:?}");
                    Ok(())
                })
                .unwrap();
            drop(elsewhere);
            let r = engine.submit(
                engine.prepare(&src, &blocks_to(1), &remotes).unwrap(),
                &other.into_lease(),
                Op::Write,
                None,
            );
            assert!(matches!(
                r.map(|_| ()).map_err(|r| r.error),
                Err(TransferError::LeaseMismatch)
            ));
            // A read into bytes only lent shared.
            let readable = engine.prepare(&src, &blocks_to(1), &remotes).unwrap();
            engine
                .scope(|s| {
                    assert!(matches!(
                        s.submit(&readable, &lease, Op::Read, None),
                        Err(TransferError::ReadNeedsExclusive)
                    ));
                    Ok(())
                })
                .unwrap();
        }
        node.barrier(&[0, 1], T).unwrap();
    });
}

/// Rank 1 deregisters its target after the exchange: rank 0's batch fails
/// naming the first entry, and nothing lands.
pub fn a_deregistered_region_fails_naming_the_entry() {
    job(2, |rank, mut node| {
        let (engine, target, remotes) = setup(&mut node);
        if rank == 1 {
            drop(target);
        }
        node.barrier(&[0, 1], T).unwrap();
        if rank == 0 {
            let mut src = filled(&engine, 0);
            let prepared = engine.prepare(&src, &blocks_to(1), &remotes).unwrap();
            let lease = src.lease_mut();
            let r = engine.scope(|s| s.submit(&prepared, &lease, Op::Write, None)?.wait(T));
            println!("a write to a deregistered region: {r:?}");
            assert!(
                matches!(r, Err(TransferError::RemoteAccess { peer: 1, .. })),
                "{r:?}"
            );
        }
        node.barrier(&[0, 1], T).unwrap();
    });
}

/// Owned batches: the runs hold the lease, so the segment comes back only
/// once the device is done, whoever dropped the batch; the list comes
/// back for another batch; the batch is a future too.
pub fn owned_batches_hold_their_lease() {
    job(2, |rank, mut node| {
        let (engine, target, remotes) = setup(&mut node);
        if rank == 0 {
            let src = filled(&engine, 0);
            let prepared = engine.prepare(&src, &blocks_to(1), &remotes).unwrap();
            let lease = src.into_lease();
            // Refused before posting: the error, and the list back.
            let rejected = engine
                .submit(prepared, &lease, Op::Write, Some(&[0; 65]))
                .unwrap_err();
            assert!(matches!(
                rejected.error,
                TransferError::NotificationTooLong { len: 65, max: 64 }
            ));
            assert_eq!(rejected.list.entries(), BLOCKS);
            let prepared = *rejected.list;
            let mut batch = engine
                .submit(prepared, &lease, Op::Write, Some(b"one"))
                .unwrap();
            let report = batch.wait(T).unwrap();
            assert_eq!(report.notified, 1);
            let prepared = batch.into_list().unwrap();
            // Dropped at once: nothing is freed under the device; the
            // lease comes back once its runs are done.
            let batch = engine.submit(prepared, &lease, Op::Write, None).unwrap();
            drop(batch);
            let start = Instant::now();
            let mut lease = lease;
            let seg = loop {
                match Segment::from_lease(lease) {
                    Ok(seg) => break seg,
                    Err(still) => {
                        assert!(start.elapsed() < T, "the dropped batch's runs never ended");
                        lease = still;
                        engine.progress().unwrap();
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            };
            // The future form, polled by hand.
            let prepared = engine.prepare(&seg, &blocks_to(1), &remotes).unwrap();
            let lease = seg.into_lease();
            let mut batch = engine
                .submit(prepared, &lease, Op::Write, Some(b"two"))
                .unwrap();
            let mut cx = Context::from_waker(Waker::noop());
            let report = loop {
                if let Poll::Ready(r) = std::pin::Pin::new(&mut batch).poll(&mut cx) {
                    break r.unwrap();
                }
            };
            assert_eq!(report.notified, 1);
        } else {
            for want in [&b"one"[..], b"two"] {
                let n = engine.wait_notification(T).unwrap();
                assert_eq!(&n.data[..], want);
            }
            check_target(&target, 0);
        }
        node.barrier(&[0, 1], T).unwrap();
    });
}

use std::future::Future;

/// A rail broken as a batch starts: its runs go over the other, the
/// batch succeeds and names the lost connection; both ranks bring the rail back
/// and the next batch uses both rails again.
pub fn a_lost_rail_moves_its_runs_and_comes_back() {
    job(2, |rank, mut node| {
        let (mut engine, target, remotes) = setup(&mut node);
        if rank == 0 {
            let mut src = filled(&engine, 0);
            let prepared = engine.prepare(&src, &blocks_to(1), &remotes).unwrap();
            let lease = src.lease_mut();
            let report = engine
                .scope(|s| {
                    // Broken as the batch starts (once its runs are all
                    // out, a fast device may have finished them first).
                    engine.break_rail(1, 1)?;
                    s.submit(&prepared, &lease, Op::Write, Some(b"lost"))?
                        .wait(T)
                })
                .unwrap();
            drop(lease);
            println!("with rail 1 lost: {report:?}");
            assert_eq!(report.rails_lost, [(1, 1)]);
            assert!(!engine.rail_alive(1, 1));
            assert_eq!(report.bytes, (BLOCKS * BLOCK) as u64);
        } else {
            let n = engine.wait_notification(T).unwrap();
            assert_eq!(&n.data[..], b"lost");
            check_target(&target, 0);
        }
        // Both bring rail 1 back.
        let peer = 1 - rank;
        engine.reconnect_rail(&mut node, 1, peer, T).unwrap();
        assert!(engine.rail_alive(1, peer));
        node.barrier(&[0, 1], T).unwrap();
        if rank == 0 {
            let mut src = filled(&engine, 0);
            let prepared = engine.prepare(&src, &blocks_to(1), &remotes).unwrap();
            let lease = src.lease_mut();
            let report = engine
                .scope(|s| {
                    s.submit(&prepared, &lease, Op::Write, Some(b"back"))?
                        .wait(T)
                })
                .unwrap();
            assert!(
                report.bytes_per_rail[1] > 0,
                "rail 1 carries again: {report:?}"
            );
        } else {
            let n = engine.wait_notification(T).unwrap();
            assert_eq!(&n.data[..], b"back");
        }
        node.barrier(&[0, 1], T).unwrap();
    });
}

/// Rank 1 leaves (its engine, segment and node dropped, the process
/// lives on): rank 0's next batch fails typed, `PeerUnreachable` naming
/// rank 1, within seconds, not at its 20 s deadline; the one after fails
/// at once, both rails to rank 1 known lost. Needs a transport that
/// detects a peer's end (tcp; shared memory does not).
pub fn a_peer_that_leaves_is_unreachable_on_every_rail() {
    let gone = std::sync::Arc::new(std::sync::Barrier::new(2));
    job(2, move |rank, mut node| {
        let (engine, target, remotes) = setup(&mut node);
        node.barrier(&[0, 1], T).unwrap();
        if rank == 1 {
            drop((engine, target, node));
            gone.wait();
            return;
        }
        gone.wait();
        let mut src = filled(&engine, 0);
        let prepared = engine.prepare(&src, &blocks_to(1), &remotes).unwrap();
        let lease = src.lease_mut();
        let start = Instant::now();
        let mut outcome = Ok(());
        // The first batch may land in socket buffers before the peer's
        // end is seen: a few tries.
        for _ in 0..20 {
            match engine.scope(|s| s.submit(&prepared, &lease, Op::Write, None)?.wait(T)) {
                Ok(_) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        let took = start.elapsed();
        println!("a batch to a peer that left: {outcome:?} after {took:?}");
        assert!(
            matches!(outcome, Err(TransferError::PeerUnreachable { peer: 1, .. })),
            "{outcome:?}"
        );
        assert!(took < Duration::from_secs(10), "took {took:?}");
        assert!(!engine.rail_alive(0, 1) && !engine.rail_alive(1, 1));
        let start = Instant::now();
        let again = engine.scope(|s| s.submit(&prepared, &lease, Op::Write, None)?.wait(T));
        assert!(
            matches!(
                again,
                Err(TransferError::PeerUnreachable {
                    peer: 1,
                    entry: 0,
                    last: None
                })
            ),
            "{again:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(1));
    });
}

/// Forgotten batches free nothing the device may touch. A scoped batch
/// forgotten in its scope: the scope still drains its runs before the
/// segment is lent again, nothing lands outside the entries, and its list
/// stays busy (typed). An owned batch forgotten: its runs keep the lease,
/// so the segment never comes back to be freed or reused.
pub fn forgotten_batches_free_nothing_under_the_device() {
    job(2, |rank, mut node| {
        let (engine, target, remotes) = setup(&mut node);
        if rank == 0 {
            let mut src = filled(&engine, 0);
            let prepared = engine.prepare(&src, &blocks_to(1), &remotes).unwrap();
            let lease = src.lease_mut();
            engine
                .scope(|s| {
                    std::mem::forget(s.submit(&prepared, &lease, Op::Write, None)?);
                    Ok(())
                })
                .unwrap();
            drop(lease);
            // The scope drained: the bytes are the program's again.
            src.bytes_mut()[0] ^= 1;
            let lease = src.lease_mut();
            let again = engine.scope(|s| s.submit(&prepared, &lease, Op::Write, None).map(|_| ()));
            assert!(matches!(again, Err(TransferError::Busy)), "{again:?}");
            drop(lease);
            src.bytes_mut()[0] ^= 1;
            let prepared = engine.prepare(&src, &blocks_to(1), &remotes).unwrap();
            let lease = src.into_lease();
            std::mem::forget(engine.submit(prepared, &lease, Op::Write, None).unwrap());
            for _ in 0..50 {
                engine.progress().unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
            let still = Segment::from_lease(lease);
            assert!(still.is_err(), "a forgotten batch's runs hold the lease");
        }
        node.barrier(&[0, 1], T).unwrap();
        if rank == 1 {
            check_margins(&target);
        }
        node.barrier(&[0, 1], T).unwrap();
    });
}
