//! Async operations over real UCX (tcp and shared memory) in one process:
//! every kind round-trips with its buffer handed back; timed-out, dropped
//! and forgotten futures never let a write land in memory the program got
//! back (canaries); thousands of operations in flight at once.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Rng, WAIT, exposed, local, pattern, world};
use ferrovia_async::{AsyncConfig, Wake};
use ferrovia_channel::TransportError;
use ferrovia_mr::RegisterOptions;
use ferrovia_types::WcStatus;
use tokio::time::timeout;

async fn every_operation_round_trips(tls: &str, cfg: AsyncConfig) {
    let w = world(2, tls, cfg);
    let (a, b) = (&w[0], &w[1]);
    // b exposes memory; a learns where.
    let board = exposed(b, 4096);
    let remote = board.registration().remote().unwrap();
    board.write_from(0, &pattern(4096, 3)).unwrap();

    // A send with an immediate into a receive posted before the send.
    let inbox = b.receive(0, local(b, &[0; 64]));
    let sent = a
        .send_with_imm(1, local(a, b"hello async"), 0..11, 42)
        .await
        .unwrap();
    assert_eq!(&sent.buf[..11], b"hello async", "the source comes back");
    let got = timeout(WAIT, inbox).await.unwrap().unwrap();
    assert_eq!(got.received(), b"hello async");
    assert_eq!((got.imm(), got.peer()), (Some(42), Some(0)));

    // An RDMA read of b's memory into a's buffer.
    let read = a.read(1, local(a, &[0; 4096]), remote).await.unwrap();
    assert_eq!(read.bytes(), &pattern(4096, 3)[..]);

    // A write with an immediate: the data, then the notification.
    let note = b.receive(0, local(b, &[0; 8]));
    let src = Arc::new(local(a, &pattern(512, 9)));
    let done = a
        .write_with_imm(1, src.clone(), 0..512, remote, 7)
        .await
        .unwrap();
    assert!(Arc::ptr_eq(&done.buf, &src), "an Arc'd source comes back");
    drop(done);
    let n = timeout(WAIT, note).await.unwrap().unwrap();
    assert_eq!((n.imm(), n.byte_len()), (Some(7), 0));
    let mut now = vec![0; 512];
    board.read_into(0, &mut now).unwrap();
    assert_eq!(now, pattern(512, 9));
    assert_eq!(
        Arc::strong_count(&src),
        1,
        "the engine let go of the source"
    );

    // Without the owner's atomic right, refused before the transport is
    // asked, the buffer back; with it, the word's original value comes
    // back in the result buffer.
    let f = a
        .fetch_add(1, local(a, &[0; 8]), 0..8, remote, 1)
        .await
        .unwrap_err();
    assert!(
        matches!(f.error, TransportError::RemoteAccessDenied { .. }),
        "{f}"
    );
    assert_eq!(f.buf.len(), 8);
    let words = b
        .registry()
        .alloc(8, RegisterOptions::local().allow_remote_atomic())
        .unwrap();
    let atomic = words.registration().remote().unwrap();
    words.store_u64(0, 40).unwrap();
    let added = a
        .fetch_add(1, local(a, &[0; 8]), 0..8, atomic, 2)
        .await
        .unwrap();
    assert_eq!(added.original_value(), Some(40));
    let swapped = a
        .compare_swap(1, added.into_buf(), 0..8, atomic, 42, 7)
        .await
        .unwrap();
    assert_eq!(swapped.original_value(), Some(42));
    assert_eq!(words.load_u64(0).unwrap(), 7);
    assert_eq!(a.outstanding() + b.outstanding(), 0);
    if a.config().wake == Wake::SLEEP_AT_ONCE {
        // Sleeping in the kernel at once: the reactors woke from the
        // event fd.
        assert!(a.event_wakes() + b.event_wakes() > 0, "no kernel wake-up");
    } else {
        assert_eq!(
            a.event_wakes() + b.event_wakes(),
            0,
            "busy polling sleeps not"
        );
    }
}

/// A receive whose timeout expired still takes the next message: into the
/// buffer the engine kept, handed over once the message landed.
async fn a_timed_out_receive_keeps_its_buffer(tls: &str) {
    let w = world(2, tls, AsyncConfig::default());
    let (a, b) = (&w[0], &w[1]);
    let late = timeout(Duration::from_millis(20), b.receive(0, local(b, &[0; 32]))).await;
    assert!(late.is_err(), "nothing was sent yet");
    assert!(
        b.take_returned().is_empty(),
        "still posted: not handed back"
    );
    let fresh = b.receive(0, local(b, &[0; 32]));
    a.send(1, local(a, b"first")).await.unwrap();
    a.send(1, local(a, b"second")).await.unwrap();
    let second = timeout(WAIT, fresh).await.unwrap().unwrap();
    assert_eq!(second.received(), b"second");
    let back = b.take_returned();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].completion.status, WcStatus::SUCCESS);
    assert_eq!(back[0].completion.byte_len, 5);
    assert_eq!(back[0].buf.len(), 32);
}

/// Reads dropped at random points (before their first poll, after a few,
/// by a timeout): the memory each targets stays the engine's until its
/// completion, so buffers allocated right after (where a freed target
/// would be reused) keep their canaries, and every target comes back.
async fn dropped_and_forgotten_reads_never_hit_reused_memory(tls: &str) {
    const SIZE: usize = 1 << 16;
    const ROUNDS: usize = 200;
    let w = world(2, tls, AsyncConfig::default());
    let (a, b) = (&w[0], &w[1]);
    let source = exposed(b, SIZE);
    source.write_from(0, &pattern(SIZE, 5)).unwrap();
    let remote = source.registration().remote().unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut canaries = Vec::new();
    let mut forgotten = 0;
    let mut completed = 0;
    for i in 0..ROUNDS {
        let op = a.read(1, local(a, &[0; SIZE]), remote);
        match rng.below(4) {
            0 => drop(op),
            1 => {
                let waited = Duration::from_micros(rng.below(200));
                if timeout(waited, op).await.is_ok() {
                    completed += 1;
                }
            }
            2 if i % 8 == 0 => {
                std::mem::forget(op);
                forgotten += 1;
            }
            _ => {
                let mut op = Box::pin(op);
                for _ in 0..rng.below(3) {
                    if futures_poll_once(op.as_mut()).await {
                        completed += 1;
                        break;
                    }
                }
                drop(op);
            }
        }
        // Where an early free would put the next allocation.
        canaries.push(local(a, &[0xcc; SIZE]));
    }
    let start = std::time::Instant::now();
    while a.outstanding() > 0 && start.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        a.outstanding(),
        0,
        "every dropped or forgotten read completed"
    );
    for c in &canaries {
        assert!(
            c.iter().all(|&x| x == 0xcc),
            "a read landed in reused memory"
        );
    }
    let back = a.take_returned();
    // Each target came back once: awaited, returned, or still held by the
    // engine for a forgotten future (until the engine is dropped).
    assert_eq!(back.len() + completed + forgotten, ROUNDS);
    assert!(forgotten > 0);
    for r in &back {
        if r.completion.status == WcStatus::SUCCESS {
            let ferrovia_channel::OwnedBuf::Plain(buf) = &r.buf else {
                panic!("a read's target comes back as it went in");
            };
            assert_eq!(&buf[..], &pattern(SIZE, 5)[..]);
        }
    }
}

/// Polls `f` once, whatever it returns.
/// Polls `f` once; whether it finished (a finished future is not polled
/// again).
async fn futures_poll_once<F: std::future::Future + Unpin>(f: F) -> bool {
    let mut f = f;
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(std::pin::Pin::new(&mut f).poll(cx).is_ready())
    })
    .await
}

/// Thousands of writes and sends in flight at once, more than the queues
/// hold: the ones that find a queue full wait for room, none is lost.
async fn thousands_of_operations_at_once(tls: &str, cfg: AsyncConfig) {
    const OPS: usize = 4000;
    let w = world(2, tls, cfg);
    let (a, b) = (w[0].clone(), w[1].clone());
    let board = exposed(&b, 8 * OPS);
    let remote = board.registration().remote().unwrap();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..OPS {
        let a = a.clone();
        let dst = remote.sub_region(8 * i as u64, 8).unwrap();
        set.spawn(async move {
            let src = local(&a, &(i as u64 + 1).to_ne_bytes());
            a.write(1, src, dst).await.map(drop).map_err(|e| e.error)
        });
    }
    while let Some(r) = timeout(WAIT, set.join_next()).await.unwrap() {
        r.unwrap().unwrap();
    }
    for i in 0..OPS {
        assert_eq!(board.load_u64(8 * i).unwrap(), i as u64 + 1, "write {i}");
    }
}

/// Writes and sends posted as lists (one doorbell per 16, selective
/// signalling), one future for each list: every operation has its own
/// result and buffer, and a list dropped in flight leaves its buffers to
/// the returned list once their completions arrive.
async fn lists_complete_every_operation(tls: &str) {
    let w = world(2, tls, AsyncConfig::default());
    let (a, b) = (&w[0], &w[1]);
    let board = exposed(b, 8 * 50);
    let remote = board.registration().remote().unwrap();
    let items = |from: u64, n: u64| {
        (from..from + n).map(|i| {
            let src = local(a, &(i + 1).to_ne_bytes());
            (src, 0..8, remote.sub_region(8 * i, 8).unwrap())
        })
    };
    drop(a.write_list(1, items(40, 10)));
    let list = a.write_list(1, items(0, 40));
    assert_eq!(list.len(), 40);
    let results = timeout(WAIT, list).await.unwrap();
    for (i, r) in results.into_iter().enumerate() {
        let done = r.unwrap();
        assert_eq!(done.buf[..], (i as u64 + 1).to_ne_bytes());
    }
    for i in 0..50 {
        assert_eq!(board.load_u64(8 * i).unwrap(), i as u64 + 1, "write {i}");
    }
    let start = std::time::Instant::now();
    let mut back = a.take_returned();
    while back.len() < 10 && start.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(2)).await;
        back.extend(a.take_returned());
    }
    assert_eq!(back.len(), 10, "the dropped writes' sources come back");
    assert!(
        back.iter()
            .all(|r| r.completion.status == WcStatus::SUCCESS)
    );
    let receives: Vec<_> = (0..20).map(|_| b.receive(0, local(b, &[0; 8]))).collect();
    let msg = Arc::new(local(a, b"listed!!"));
    let sent = timeout(WAIT, a.send_list(1, (0..20).map(|_| (msg.clone(), 0..8))))
        .await
        .unwrap();
    assert!(sent.into_iter().all(|r| r.is_ok()));
    for r in receives {
        assert_eq!(
            timeout(WAIT, r).await.unwrap().unwrap().received(),
            b"listed!!"
        );
    }
    assert_eq!(Arc::strong_count(&msg), 1);
}

macro_rules! on {
    ($tls:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn every_operation_round_trips_sleeping_in_the_kernel() {
            super::every_operation_round_trips(
                $tls,
                AsyncConfig::default().wake(Wake::SLEEP_AT_ONCE),
            )
            .await;
        }

        #[tokio::test(flavor = "current_thread")]
        async fn every_operation_round_trips_busy_polling() {
            super::every_operation_round_trips($tls, AsyncConfig::default().busy_poll()).await;
        }

        #[tokio::test(flavor = "current_thread")]
        async fn lists_complete_every_operation() {
            super::lists_complete_every_operation($tls).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_timed_out_receive_keeps_its_buffer() {
            super::a_timed_out_receive_keeps_its_buffer($tls).await;
        }

        #[tokio::test(flavor = "current_thread")]
        async fn dropped_and_forgotten_reads_never_hit_reused_memory() {
            super::dropped_and_forgotten_reads_never_hit_reused_memory($tls).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn thousands_of_operations_at_once() {
            let cfg = AsyncConfig::default().wake(Wake::Kernel {
                spin: Duration::from_micros(20),
            });
            super::thousands_of_operations_at_once($tls, cfg).await;
        }
    };
}

mod tcp {
    use super::*;
    on!("tcp");
}

mod shared_memory {
    use super::*;
    on!("sm,self");
}
