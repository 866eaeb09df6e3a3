//! Channel device tests on (soft-)RoCE. Run by `cargo xtask test`.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use common::{WAIT, buf, pair, pair_with, pattern, remote_rw};
use ferrovia_channel::{
    AtomicOp, AtomicWorkRequest, Gather, ReadWorkRequest, ReceiveWorkRequest, Scatter, ScopeError,
    ScopeTarget, SendWorkRequest, TransportError, WriteWorkRequest,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_verbs::{ConnectOptions, WcClass};

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn every_operation_on_one_channel() {
    let (mut a, mut b) = pair();
    for len in [1usize, 60, 4096, 300_000] {
        let data = pattern(len, len as u8);
        let src = buf(&a, &data, RegisterOptions::local());
        let mut inbox = buf(&b, &vec![0; len], RegisterOptions::local());
        // Peers write shared memory; a receive's target is local.
        let target = b.registry().alloc(len, remote_rw()).unwrap();
        let remote = target.registration().remote().unwrap();

        // send / receive, with an immediate
        b.scope(|rx| {
            let r = rx.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
            a.scope(|tx| {
                let g = [Gather::of(&src)?];
                tx.post_send(SendWorkRequest::new(&g)?.with_imm(len as u32))?
                    .wait(WAIT)?;
                Ok::<_, TransportError>(())
            })
            .map_err(|e| TransportError::Config(e.to_string()))?;
            let done = r.wait(WAIT)?;
            assert_eq!((done.byte_len(), done.imm()), (len, Some(len as u32)));
            assert_eq!(done.into_received().unwrap(), &data[..]);
            Ok::<_, TransportError>(())
        })
        .unwrap();

        // write with immediate, then read it back
        b.scope(|rx| {
            let note = rx.post_receive(ReceiveWorkRequest::empty())?;
            a.write(&[Gather::of(&src)?], remote)?;
            let mut back = a
                .registry()
                .register_buffer(vec![0u8; len], RegisterOptions::local())?;
            a.read(Scatter::of(&mut back)?, remote)?;
            assert_eq!(&back[..], &data[..], "read back {len}");
            a.scope(|tx| {
                let g = [Gather::of(&src)?];
                tx.post_write(WriteWorkRequest::new(&g, remote)?.with_imm(7))?
                    .wait(WAIT)?;
                Ok::<_, TransportError>(())
            })
            .map_err(|e| TransportError::Config(e.to_string()))?;
            assert_eq!(note.wait(WAIT)?.imm(), Some(7));
            Ok::<_, TransportError>(())
        })
        .unwrap();
        assert_eq!(target.to_vec(), data, "write {len}");
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn blocking_calls_and_received_buffers_handed_back_in_a_loop() {
    let (mut a, mut b) = pair();
    const N: usize = 8;
    let mut inbox = buf(&b, &[0; N * 64], RegisterOptions::local());
    let msgs: Vec<_> = (0..N)
        .map(|i| buf(&a, &pattern(10 + i, i as u8), RegisterOptions::local()))
        .collect();
    b.scope(|rx| {
        let (bytes, reg) = inbox.split_mut();
        let mut handles = Vec::new();
        for chunk in bytes.chunks_mut(64) {
            handles.push(rx.post_receive(ReceiveWorkRequest::new(Scatter::new(reg, chunk)?))?);
        }
        for m in &msgs {
            a.send(&[Gather::of(m)?])?;
        }
        // Read each message inside the scope, as it arrives.
        for (i, h) in handles.into_iter().enumerate() {
            let got = h.wait(WAIT)?.into_received().unwrap();
            assert_eq!(got, &pattern(10 + i, i as u8)[..]);
            got.fill(0xee); // the buffer is ours again
        }
        Ok::<_, TransportError>(())
    })
    .unwrap();
    assert!(inbox.chunks(64).all(|c| c[0] == 0xee));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_write_list_with_selective_signalling_completes_as_one() {
    let (mut a, b) = pair();
    const N: usize = 100;
    let target = buf(&b, &[0; N * 32], remote_rw());
    let remote = target.registration().remote().unwrap();
    let src = buf(&a, &pattern(N * 32, 3), RegisterOptions::local());
    a.scope(|s| {
        let gathers: Vec<[Gather<'_>; 1]> = (0..N)
            .map(|i| Ok([Gather::range(&src, i * 32..(i + 1) * 32)?]))
            .collect::<Result<_, TransportError>>()?;
        let wrs: Vec<_> = gathers
            .iter()
            .enumerate()
            .map(|(i, g)| WriteWorkRequest::new(g, remote.sub_region(i as u64 * 32, 32)?))
            .collect::<Result<_, _>>()?;
        // One handle for the list: the last request's, signalled.
        s.post_write_list(&wrs)?.wait(WAIT)?;
        Ok::<_, TransportError>(())
    })
    .unwrap();
    assert_eq!(target.to_vec(), pattern(N * 32, 3));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_send_without_a_receive_fails_with_a_typed_rnr_error() {
    let opts = ConnectOptions::default().rnr_retry(1).min_rnr_timer(1);
    let (mut a, _b) = pair_with(opts, Duration::from_secs(10));
    let src = buf(&a, b"nobody listens", RegisterOptions::local());
    let started = Instant::now();
    let err = a.send(&[Gather::of(&src).unwrap()]).unwrap_err();
    match err {
        TransportError::Completion(c) => {
            assert_eq!(c.status.class(), WcClass::ReceiverNotReady, "{c}")
        }
        other => panic!("expected an RNR completion error, got {other}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    // The failure broke the connection: the core knows, and the next post
    // says so.
    assert!(a.core().is_broken(0));
    let again = a.send(&[Gather::of(&src).unwrap()]).unwrap_err();
    assert!(
        matches!(again, TransportError::Broken { peer: 0 }),
        "{again}"
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_receive_that_never_matches_is_flushed_at_the_drain_deadline() {
    let deadline = Duration::from_millis(500);
    let (_a, mut b) = pair_with(ConnectOptions::default(), deadline);
    let mut inbox = buf(&b, &[0; 64], RegisterOptions::local());
    let started = Instant::now();
    let mut posted = 0;
    let r = b.scope(|rx| {
        let h = rx.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
        posted = h.wr_id();
        Ok::<_, TransportError>(())
    });
    let took = started.elapsed();
    match r {
        Err(ScopeError::Drain(d)) => {
            assert_eq!(d.flushed, vec![posted]);
            assert!(d.failed.is_empty(), "{d}");
        }
        other => panic!("expected a drain error naming the flushed receive, got {other:?}"),
    }
    assert!(took >= deadline, "returned before the deadline: {took:?}");
    assert!(took <= deadline + Duration::from_secs(1), "took {took:?}");
    inbox[0] = 1; // the buffer is free again
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_destroyed_peer_gives_a_typed_error_not_a_hang() {
    let opts = ConnectOptions::default().timeout(10).retry_cnt(2); // ~4 ms per try
    let (mut a, b) = pair_with(opts, Duration::from_secs(10));
    let target = buf(&b, &[0; 4096], remote_rw());
    let remote = target.registration().remote().unwrap();
    drop(b); // destroys the peer's QP (its registry keeps `target` alive)
    let src = buf(&a, &[1; 4096], RegisterOptions::local());
    let started = Instant::now();
    let err = a.write(&[Gather::of(&src).unwrap()], remote).unwrap_err();
    match err {
        TransportError::Completion(c) => {
            assert_eq!(c.status.class(), WcClass::RetryExceeded, "{c}")
        }
        other => panic!("expected a retry-exceeded completion error, got {other}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    drop(target);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_panic_in_the_closure_still_drains_before_unwinding() {
    let deadline = Duration::from_millis(300);
    let (_a, mut b) = pair_with(ConnectOptions::default(), deadline);
    let mut inbox = buf(&b, &[0; 64], RegisterOptions::local());
    let started = Instant::now();
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _ = b.scope(|rx| -> Result<(), TransportError> {
            let _h = rx.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
            panic!("boom");
        });
    }));
    assert!(r.is_err(), "the panic must propagate");
    assert!(
        started.elapsed() >= deadline,
        "the scope unwound before draining"
    );
    inbox[0] = 1;
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn bad_requests_are_typed_errors_before_posting() {
    let (a, b) = pair();
    let small = buf(&b, &[0; 16], remote_rw());
    let remote = small.registration().remote().unwrap();
    let big = buf(&a, &[0; 64], RegisterOptions::local());
    let g = [Gather::of(&big).unwrap()];
    assert!(matches!(
        WriteWorkRequest::new(&g, remote),
        Err(TransportError::RemoteTooSmall {
            local: 64,
            remote: 16
        })
    ));
    assert!(matches!(
        Gather::range(&big, 60..70),
        Err(TransportError::Memory(_))
    ));
    let five = [g[0]; 5];
    assert!(matches!(
        SendWorkRequest::new(&five),
        Err(TransportError::TooManyElements { count: 5, max: 4 })
    ));
    let mut local_only = a
        .registry()
        .register_buffer(vec![0u8; 8], RegisterOptions::local())
        .unwrap();
    let mut back = [0u8; 8];
    let other = a
        .registry()
        .register_buffer(vec![0u8; 8], RegisterOptions::local())
        .unwrap();
    assert!(
        Scatter::new(other.registration(), &mut back).is_err(),
        "a slice outside the registration"
    );
    assert!(
        ReadWorkRequest::new(
            Scatter::of(&mut local_only).unwrap(),
            remote.sub_region(0, 4).unwrap()
        )
        .is_err()
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn atomics_hand_back_the_original_value() {
    let (mut a, b) = pair();
    let counter = b
        .registry()
        .alloc(64, RegisterOptions::local().allow_remote_atomic())
        .unwrap();
    counter.store_u64(8, 40).unwrap();
    let word = counter
        .registration()
        .remote()
        .unwrap()
        .sub_region(8, 8)
        .unwrap();
    let mut result = a.registry().alloc(8, RegisterOptions::local()).unwrap();
    a.scope(|s| {
        // The result buffer comes back with each completion and goes out
        // with the next request.
        let mut buf = Scatter::of(&mut result)?;
        let ops = [
            (AtomicOp::FetchAdd { add: 1 }, 40),
            (AtomicOp::FetchAdd { add: 1 }, 41),
            (AtomicOp::FetchAdd { add: 1 }, 42),
            // Compare-and-swap: a wrong guess leaves the word, a right one
            // swaps; both see 43.
            (
                AtomicOp::CompareSwap {
                    compare: 7,
                    swap: 100,
                },
                43,
            ),
            (
                AtomicOp::CompareSwap {
                    compare: 43,
                    swap: 100,
                },
                43,
            ),
        ];
        for (op, before) in ops {
            let done = s
                .post_atomic(AtomicWorkRequest::new(buf, word, op)?)?
                .wait(WAIT)?;
            assert_eq!(done.original_value(), Some(before), "{op:?}");
            buf = done.into_scatter().unwrap();
        }
        Ok::<_, TransportError>(())
    })
    .unwrap();
    // The owner reads the word with an atomic load.
    assert_eq!(counter.load_u64(8).unwrap(), 100);
}
