//! The UCX transport under the scoped channel core, in one process over
//! tcp (and, for key revocation, shared memory too): every operation, its
//! ordering, and the typed failures.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ferrovia_channel::{
    ChannelConfig, Gather, MultiChannel, PeerReadWorkRequest, PeerReceiveWorkRequest,
    PeerSendWorkRequest, PeerWriteWorkRequest, ReadWorkRequest, ReceiveWorkRequest, Scatter,
    SendWorkRequest, TransportError, WriteWorkRequest,
};
use ferrovia_mr::{RegisterOptions, RegisteredBuffer};
use ferrovia_types::WcClass;
use ferrovia_ucx::UcxTransport;

#[test]
fn send_receive_with_gather_scatter_and_immediates_in_order() {
    let mut w = world(2);
    let (a, b) = w.split_at_mut(1);
    let (a, b) = (&mut a[0].0, &mut b[0].0);
    let head = buf(a, b"head-", RegisterOptions::local());
    let tail = buf(a, b"tail", RegisterOptions::local());
    let mut inbox = buf(b, &[0; 64], RegisterOptions::local());
    let mut many = buf(b, &[0; 16 * 8], RegisterOptions::local());
    let numbers: Vec<RegisteredBuffer> = (0..16u64)
        .map(|i| buf(a, &i.to_le_bytes(), RegisterOptions::local()))
        .collect();
    b.scope(|rx| {
        let (bytes, reg) = inbox.split_mut();
        let (first, second) = bytes.split_at_mut(3);
        let r = rx.post_receive(PeerReceiveWorkRequest::new(
            0,
            ReceiveWorkRequest::scatter([Scatter::new(reg, first)?, Scatter::new(reg, second)?])?,
        ))?;
        let (mbytes, mreg) = many.split_mut();
        let recvs = mbytes
            .chunks_mut(8)
            .map(|c| {
                rx.post_receive(PeerReceiveWorkRequest::new(
                    0,
                    ReceiveWorkRequest::new(Scatter::new(mreg, c)?),
                ))
            })
            .collect::<Result<Vec<_>, _>>()?;
        a.scope(|tx| {
            let g = [Gather::of(&head)?, Gather::of(&tail)?];
            tx.post_send(PeerSendWorkRequest::new(
                1,
                SendWorkRequest::new(&g)?.with_imm(42),
            ))?
            .wait(WAIT)?;
            for n in &numbers {
                let g = [Gather::of(n)?];
                let _ = tx.post_send(PeerSendWorkRequest::new(1, SendWorkRequest::new(&g)?))?;
            }
            Ok::<_, TransportError>(())
        })
        .map_err(|e| TransportError::Config(e.to_string()))?;
        let done = r.wait(WAIT)?;
        assert_eq!(done.imm(), Some(42));
        assert_eq!(done.byte_len(), 9);
        let got: Vec<u8> = done.into_buffers().flat_map(|b| b.to_vec()).collect();
        assert_eq!(&got[..9], b"head-tail");
        for (i, h) in recvs.into_iter().enumerate() {
            let d = h.wait(WAIT)?;
            assert_eq!(d.imm(), None);
            let v = u64::from_le_bytes(d.into_received().unwrap().try_into().unwrap());
            assert_eq!(v, i as u64, "messages arrive in posting order");
        }
        Ok::<_, TransportError>(())
    })
    .unwrap();
}

#[test]
fn write_read_and_write_with_immediate() {
    let mut w = world(2);
    let (a, b) = w.split_at_mut(1);
    let (a, b) = (&mut a[0].0, &mut b[0].0);
    let target = buf(b, &[0; 4096], rw());
    let remote = target.registration().remote().unwrap();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let src = buf(a, &data, RegisterOptions::local());
    let mut back = buf(a, &[0; 100], RegisterOptions::local());
    let mut note = buf(b, &[0; 1], RegisterOptions::local());
    b.scope(|rx| {
        let (nb, nr) = note.split_mut();
        let r = rx.post_receive(PeerReceiveWorkRequest::new(
            0,
            ReceiveWorkRequest::new(Scatter::new(nr, nb)?),
        ))?;
        a.scope(|tx| {
            let g = [Gather::of(&src)?];
            tx.post_write(PeerWriteWorkRequest::new(
                1,
                WriteWorkRequest::new(&g, remote)?,
            ))?
            .wait(WAIT)?;
            let (bb, br) = back.split_mut();
            let read = tx.post_read(PeerReadWorkRequest::new(
                1,
                ReadWorkRequest::new(Scatter::new(br, bb)?, remote.sub_region(1000, 100)?)?,
            ))?;
            assert_eq!(read.wait(WAIT)?.into_buffer().unwrap(), &data[1000..1100]);
            let g = [Gather::range(&src, 0..8)?];
            tx.post_write(PeerWriteWorkRequest::new(
                1,
                WriteWorkRequest::new(&g, remote.sub_region(4088, 8)?)?.with_imm(7),
            ))?
            .wait(WAIT)?;
            Ok::<_, TransportError>(())
        })
        .map_err(|e| TransportError::Config(e.to_string()))?;
        let d = r.wait(WAIT)?;
        assert_eq!(d.imm(), Some(7));
        Ok::<_, TransportError>(())
    })
    .unwrap();
    let target = target.to_vec();
    assert_eq!(&target[..4088], &data[..4088]);
    assert_eq!(
        &target[4088..],
        &data[..8],
        "the immediate came after the data"
    );
}

#[test]
fn a_message_longer_than_the_receive_is_a_length_error() {
    let mut w = world(2);
    let (a, b) = w.split_at_mut(1);
    let (a, b) = (&mut a[0].0, &mut b[0].0);
    let big = buf(a, &[1; 64], RegisterOptions::local());
    let mut small = buf(b, &[0; 8], RegisterOptions::local());
    let err = b
        .scope(|rx| {
            let r = rx.post_receive(PeerReceiveWorkRequest::new(
                0,
                ReceiveWorkRequest::new(Scatter::of(&mut small)?),
            ))?;
            a.scope(|tx| {
                let g = [Gather::of(&big)?];
                tx.post_send(PeerSendWorkRequest::new(1, SendWorkRequest::new(&g)?))?
                    .wait(WAIT)
                    .map(|_| ())
            })
            .map_err(|e| TransportError::Config(e.to_string()))?;
            r.wait(WAIT).map(|_| ())
        })
        .unwrap_err();
    let e = err.closure().expect("the receive failed");
    assert_eq!(class(e), Some(WcClass::LocalLength), "{e}");
}

#[test]
fn access_outside_a_registration_or_its_rights_is_refused() {
    // An error completion breaks the connection (as on verbs), so the
    // second case uses a third rank.
    let mut w = world(3);
    let (a, rest) = w.split_at_mut(1);
    let (a, b) = (&mut a[0].0, &mut rest[0].0);
    let read_only = buf(b, &[5; 64], RegisterOptions::local().allow_remote_read());
    let remote = read_only.registration().remote().unwrap();
    let src = buf(a, &[9; 64], RegisterOptions::local());
    // The descriptor says it is read-only: refused before posting...
    let g = [Gather::of(&src).unwrap()];
    assert!(matches!(
        WriteWorkRequest::new(&g, remote),
        Err(TransportError::RemoteAccessDenied { .. })
    ));
    // ...and one that claims more rights than granted is refused by the
    // transport.
    let remote = ferrovia_mr::RemoteMemoryRegion::new(remote.addr(), 64, remote.rkey()).unwrap();
    let err = a
        .scope(|tx| {
            let g = [Gather::of(&src)?];
            tx.post_write(PeerWriteWorkRequest::new(
                1,
                WriteWorkRequest::new(&g, remote)?,
            ))?
            .wait(WAIT)
            .map(|_| ())
        })
        .unwrap_err();
    let e = err.closure().expect("the write failed");
    assert_eq!(class(e), Some(WcClass::RemoteAccess), "{e}");
    assert!(read_only.iter().all(|&x| x == 5), "nothing was written");
    // A key the peer never issued.
    let forged =
        ferrovia_mr::RemoteMemoryRegion::new(remote.addr(), 64, remote.rkey() + 1000).unwrap();
    let mut dst = buf(a, &[0; 64], RegisterOptions::local());
    let err = a
        .scope(|tx| {
            tx.post_read(PeerReadWorkRequest::new(
                2,
                ReadWorkRequest::new(Scatter::of(&mut dst)?, forged)?,
            ))?
            .wait(WAIT)
            .map(|_| ())
        })
        .unwrap_err();
    let e = err.closure().expect("the read failed");
    assert_eq!(class(e), Some(WcClass::RemoteAccess), "{e}");
}

#[test]
fn malformed_control_messages_are_counted_and_dropped() {
    let mut w = world(2);
    let t1 = w[1].1.clone();
    // SAFETY: none is a key reply (they do not decode, come from unknown
    // senders, or acknowledge what nobody revoked).
    unsafe {
        w[0].1.send_raw_control(1, vec![0xff; 3]);
        w[0].1
            .send_raw_control(1, b"Q\x09\0\0\0\x01\0\0\0".to_vec()); // sender 9 of 2
        // An acknowledgement of a revocation nobody sent.
        w[0].1.send_raw_control(1, b"A\0\0\0\0\x4d\0\0\0".to_vec());
        // A goodbye from an unknown sender.
        w[0].1.send_raw_control(1, b"B\x09\0\0\0".to_vec());
    }
    let deadline = std::time::Instant::now() + WAIT;
    while t1.malformed_messages() < 4 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(t1.malformed_messages(), 4);
    // The transport still works.
    let (a, b) = w.split_at_mut(1);
    let (a, b) = (&mut a[0].0, &mut b[0].0);
    let m = buf(a, b"still here", RegisterOptions::local());
    let mut inbox = buf(b, &[0; 16], RegisterOptions::local());
    b.scope(|rx| {
        let r = rx.post_receive(PeerReceiveWorkRequest::new(
            0,
            ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
        ))?;
        a.scope(|tx| {
            let g = [Gather::of(&m)?];
            tx.post_send(PeerSendWorkRequest::new(1, SendWorkRequest::new(&g)?))?
                .wait(WAIT)
                .map(|_| ())
        })
        .map_err(|e| TransportError::Config(e.to_string()))?;
        assert_eq!(r.wait(WAIT)?.into_received().unwrap(), b"still here");
        Ok::<_, TransportError>(())
    })
    .unwrap();
}

#[test]
fn a_receive_ring_reposts_its_buffers_in_one_scope() {
    const SLOTS: usize = 4;
    const MESSAGES: u64 = 64;
    let mut w = world(2);
    let (a, b) = w.split_at_mut(1);
    let (a, b) = (&mut a[0].0, &mut b[0].0);
    let numbers: Vec<RegisteredBuffer> = (0..MESSAGES)
        .map(|i| buf(a, &i.to_le_bytes(), RegisterOptions::local()))
        .collect();
    let mut ring = buf(b, &[0; 8 * SLOTS], RegisterOptions::local());
    let mut seen = Vec::new();
    b.scope(|rx| {
        let (bytes, reg) = ring.split_mut();
        let mut pending = std::collections::VecDeque::new();
        for slot in bytes.chunks_mut(8) {
            pending.push_back(rx.post_receive(PeerReceiveWorkRequest::new(
                0,
                ReceiveWorkRequest::new(Scatter::new(reg, slot)?),
            ))?);
        }
        // Small sends complete eagerly, before the ring takes them in.
        a.scope(|tx| {
            for n in &numbers {
                let g = [Gather::of(n)?];
                tx.post_send(PeerSendWorkRequest::new(1, SendWorkRequest::new(&g)?))?
                    .wait(WAIT)?;
            }
            Ok::<_, TransportError>(())
        })
        .map_err(|e| TransportError::Config(e.to_string()))?;
        while (seen.len() as u64) < MESSAGES {
            let done = pending
                .pop_front()
                .expect("a receive is posted")
                .wait(WAIT)?;
            let slot = done.into_scatter().expect("the buffer comes back");
            seen.push(u64::from_le_bytes(slot.bytes().try_into().unwrap()));
            // The same slot, posted again without leaving the scope, while
            // messages are left for it.
            if seen.len() as u64 + (pending.len() as u64) < MESSAGES {
                pending.push_back(rx.post_receive(PeerReceiveWorkRequest::new(
                    0,
                    ReceiveWorkRequest::new(slot),
                ))?);
            }
        }
        Ok::<_, TransportError>(())
    })
    .unwrap();
    assert_eq!(seen, (0..MESSAGES).collect::<Vec<_>>());
}

#[test]
fn memory_ucx_allocates_is_zeroed_aligned_and_reachable() {
    let mut w = world(2);
    let (a, b) = w.split_at_mut(1);
    let (a, b) = (&mut a[0].0, &mut b[0].0);
    let target = b.registry().alloc(3 * 4096 + 5, rw()).unwrap();
    assert!(target.to_vec().iter().all(|&x| x == 0));
    assert_eq!(target.addr() % 4096, 0);
    let remote = target.registration().remote().unwrap();
    let src = buf(a, &[0xab; 100], RegisterOptions::local());
    let mut back = a.registry().alloc(100, RegisterOptions::local()).unwrap();
    a.scope(|tx| {
        let g = [Gather::of(&src)?];
        let dst = remote.sub_region(4096, 100)?;
        tx.post_write(PeerWriteWorkRequest::new(
            1,
            WriteWorkRequest::new(&g, dst)?,
        ))?
        .wait(WAIT)?;
        tx.post_read(PeerReadWorkRequest::new(
            1,
            ReadWorkRequest::new(Scatter::of(&mut back)?, dst)?,
        ))?
        .wait(WAIT)?;
        Ok::<_, TransportError>(())
    })
    .unwrap();
    assert!(back.iter().all(|&x| x == 0xab));
    let target = target.to_vec();
    assert!(target[4096..4196].iter().all(|&x| x == 0xab));
    assert_eq!(target[4095], 0);
}

#[test]
fn a_vanished_peer_fails_pending_work_with_a_typed_error_quickly() {
    let mut w = world(2);
    let (b, t_b) = w.pop().expect("rank 1");
    let (mut a, _) = w.pop().expect("rank 0");
    let mut inbox = buf(&a, &[0; 16], RegisterOptions::local());
    let started = std::time::Instant::now();
    let err = a
        .scope(|rx| {
            let r = rx.post_receive(PeerReceiveWorkRequest::new(
                1,
                ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
            ))?;
            // Rank 1 goes away: its worker and endpoints are destroyed.
            drop(b);
            drop(t_b);
            r.wait(WAIT).map(|_| ())
        })
        .unwrap_err();
    let e = err.closure().expect("the receive failed");
    assert!(
        matches!(e, TransportError::Completion(_)),
        "a completion error, not a timeout: {e}"
    );
    assert!(started.elapsed() < WAIT / 2, "took {:?}", started.elapsed());
}

#[test]
fn an_abandoned_receive_is_cancelled_at_the_drain_deadline_before_the_scope_returns() {
    let mut w = world(2);
    let (a, _) = &mut w[0];
    let mut inbox = buf(a, &[0; 16], RegisterOptions::local());
    let started = std::time::Instant::now();
    let err = a
        .scope(|rx| {
            rx.set_drain_deadline(Duration::from_millis(200));
            // Nobody sends: the handle is dropped with UCX still holding
            // the buffer; the scope must cancel it and wait for UCX.
            drop(rx.post_receive(PeerReceiveWorkRequest::new(
                1,
                ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
            ))?);
            Ok::<_, TransportError>(())
        })
        .unwrap_err();
    let drain = err.drain().expect("the drain reports the flushed receive");
    assert_eq!(drain.flushed.len(), 1, "{drain}");
    assert!(started.elapsed() < WAIT, "took {:?}", started.elapsed());
    // The buffer is ours again, and usable.
    inbox.fill(7);
    assert!(inbox.iter().all(|&x| x == 7));
}

/// Rank 1 registers its own memory, rank 0 writes it, rank 1 drops the
/// registration, and at once (no sleep) rank 0 writes and reads it again
/// with the old descriptor: both must be refused, and the stale write must
/// not land. 50 registrations in a row.
fn stale_accesses_fail_as_soon_as_the_owner_drops_the_key(tls: &str) {
    let w = world_on(2, tls, UcxTransport::builder);
    let (t_a, reg_a) = (w[0].1.clone(), w[0].0.registry().clone());
    let reg_b = w[1].0.registry().clone();
    let live = buf(&w[0].0, &[0xee; 64], RegisterOptions::local());
    let stale = buf(&w[0].0, &[0x55; 64], RegisterOptions::local());
    let mut back = buf(&w[0].0, &[0; 64], RegisterOptions::local());
    // An error completion breaks the channel's connection (as on verbs):
    // every access that should fail gets a channel of its own over the
    // same transport.
    let channel = || MultiChannel::over(t_a.clone(), reg_a.clone(), ChannelConfig::default());
    for round in 0..50u8 {
        let mut memory = vec![round; 64];
        {
            // SAFETY: the registration is dropped in this test, never leaked.
            let exposed = unsafe { reg_b.register_shared_slice(&mut memory, rw()) }.unwrap();
            let remote = exposed.registration().remote().unwrap();
            let mut a = channel();
            assert_eq!(write(&mut a, &live, remote), Ok(()), "round {round}");
            drop(exposed);
            assert_eq!(
                write(&mut a, &stale, remote),
                Err(Some(WcClass::RemoteAccess)),
                "round {round}: a write with a revoked key"
            );
            assert_eq!(
                read(&mut channel(), &mut back, remote),
                Err(Some(WcClass::RemoteAccess)),
                "round {round}: a read with a revoked key"
            );
        }
        assert!(
            memory.iter().all(|&x| x == 0xee),
            "round {round}: the stale write landed: {memory:?}"
        );
    }
    // Rank 1's statistics: each key rank 0 had fetched was revoked.
    let stats = w[1].0.stats();
    assert_eq!(stats.peers[0].revocations, 50, "{:?}", stats.peers[0]);
    assert_eq!(stats.peers[1].revocations, 0);
}

#[test]
fn stale_accesses_fail_as_soon_as_the_owner_drops_the_key_over_tcp() {
    stale_accesses_fail_as_soon_as_the_owner_drops_the_key("tcp");
}

#[test]
fn stale_accesses_fail_as_soon_as_the_owner_drops_the_key_over_shared_memory() {
    stale_accesses_fail_as_soon_as_the_owner_drops_the_key(SHARED_MEMORY);
}

/// Rank 0 fetched rank 1's key, then stops progressing: rank 1's drop
/// waits for its acknowledgement no longer than the bound, then closes
/// the endpoint to rank 0, so work towards it fails at once.
fn a_peer_that_stops_answering_delays_the_drop_by_the_bound_and_is_closed(tls: &str) {
    const BOUND: Duration = Duration::from_millis(600);
    let mut w = world_on(2, tls, || UcxTransport::builder().revocation_timeout(BOUND));
    let t_a = w[0].1.clone();
    let (a, b) = w.split_at_mut(1);
    let (a, b) = (&mut a[0].0, &mut b[0].0);
    let exposed = buf(b, &[1; 64], rw());
    let remote = exposed.registration().remote().unwrap();
    let src = buf(a, &[2; 64], RegisterOptions::local());
    assert_eq!(write(a, &src, remote), Ok(()));
    let stall = t_a.stall_progress();
    let started = Instant::now();
    drop(exposed);
    let took = started.elapsed();
    assert!(took >= BOUND, "the drop did not wait for rank 0: {took:?}");
    assert!(
        took < BOUND + Duration::from_millis(1500),
        "the drop waited past the bound: {took:?}"
    );
    let hello = buf(b, b"hello", RegisterOptions::local());
    let started = Instant::now();
    let err = b
        .scope(|tx| {
            let g = [Gather::of(&hello)?];
            tx.post_send(PeerSendWorkRequest::new(0, SendWorkRequest::new(&g)?))?
                .wait(WAIT)
                .map(|_| ())
        })
        .unwrap_err();
    let e = err.closure().expect("the send failed");
    assert!(
        matches!(e, TransportError::Completion(_)),
        "the endpoint to rank 0 is closed: {e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    drop(stall);
}

#[test]
fn a_peer_that_stops_answering_delays_the_drop_by_the_bound_and_is_closed_over_tcp() {
    a_peer_that_stops_answering_delays_the_drop_by_the_bound_and_is_closed("tcp");
}

#[test]
fn a_peer_that_stops_answering_delays_the_drop_by_the_bound_and_is_closed_over_shared_memory() {
    a_peer_that_stops_answering_delays_the_drop_by_the_bound_and_is_closed(SHARED_MEMORY);
}
