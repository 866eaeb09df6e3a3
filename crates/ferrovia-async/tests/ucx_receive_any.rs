//! Receives from the shared pool over real UCX in one process: several
//! senders into one pool, every byte checked and every sender named; a
//! dropped receive loses and corrupts no message; no pool, a typed error.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{WAIT, local, pattern, world, world_pooled};
use ferrovia_async::{AsyncConfig, AsyncMultiChannel, Done};
use ferrovia_channel::{OwnedBuf, TransportError};
use ferrovia_mr::RegisteredBuffer;
use ferrovia_types::WcStatus;
use tokio::task::JoinSet;
use tokio::time::timeout;

const BUF: usize = 256;

/// Message `seq` of `sender`: its sender and number, then a pattern of its
/// own; lengths differ from message to message.
fn message(sender: usize, seq: usize) -> Vec<u8> {
    let len = 16 + (seq * 37 + sender * 11) % (BUF - 16);
    let mut m = pattern(len, (sender * 16 + seq) as u8);
    m[0] = sender as u8;
    m[1] = seq as u8;
    m
}

/// Checks a received message against what its header says was sent and
/// against the sender the completion named; returns (sender, seq).
fn check(peer: Option<usize>, bytes: &[u8]) -> (usize, usize) {
    let (sender, seq) = (bytes[0] as usize, bytes[1] as usize);
    assert_eq!(peer, Some(sender), "the completion names the sender");
    assert_eq!(
        bytes,
        &message(sender, seq)[..],
        "every byte of {sender}/{seq}"
    );
    (sender, seq)
}

fn checked(done: &Done<RegisteredBuffer>) -> (usize, usize) {
    check(done.peer(), done.received())
}

/// Sends `count` messages from each of `senders` to rank 0, all at once.
async fn send_all(w: &[AsyncMultiChannel], senders: &[usize], count: usize) {
    let mut sends = JoinSet::new();
    for &s in senders {
        for seq in 0..count {
            let op = w[s].send(0, local(&w[s], &message(s, seq)));
            sends.spawn(op);
        }
    }
    while let Some(sent) = sends.join_next().await {
        sent.unwrap().unwrap();
    }
}

async fn several_senders_into_one_pool(tls: &str) {
    const EACH: usize = 20;
    // A pool of 16 for 60 receives: the rest wait for room.
    let w = world_pooled(4, tls, AsyncConfig::default(), 16);
    let a = &w[0];
    let mut receives = JoinSet::new();
    for _ in 0..3 * EACH {
        receives.spawn(a.receive_any(local(a, &[0; BUF])));
    }
    send_all(&w, &[1, 2, 3], EACH).await;
    let mut seen = BTreeSet::new();
    while let Some(got) = timeout(WAIT, receives.join_next()).await.unwrap() {
        let done = got.unwrap().unwrap();
        assert_eq!(done.byte_len(), done.received().len());
        assert!(seen.insert(checked(&done)), "a message taken twice");
    }
    let expected: BTreeSet<_> = (1..4)
        .flat_map(|s| (0..EACH).map(move |q| (s, q)))
        .collect();
    assert_eq!(seen, expected, "every message of every sender, once");
    assert_eq!(a.outstanding(), 0);
}

async fn a_dropped_receive_any_loses_and_corrupts_nothing(tls: &str) {
    let w = world_pooled(3, tls, AsyncConfig::default(), 8);
    let a = &w[0];
    // Given up on before anything was sent: it stays in the pool.
    drop(a.receive_any(local(a, &[0xdd; BUF])));
    // Where a freed buffer would be reused.
    let canaries: Vec<_> = (0..4).map(|_| local(a, &[0xcc; BUF])).collect();
    assert_eq!(a.outstanding(), 1);
    let mut receives = JoinSet::new();
    for _ in 0..10 {
        receives.spawn(a.receive_any(local(a, &[0; BUF])));
    }
    // Eleven messages for ten live receives and the dropped one.
    send_all(&w[..], &[1], 6).await;
    send_all(&w[..], &[2], 5).await;
    let mut seen = BTreeSet::new();
    while let Some(got) = timeout(WAIT, receives.join_next()).await.unwrap() {
        assert!(seen.insert(checked(&got.unwrap().unwrap())));
    }
    let start = std::time::Instant::now();
    while a.outstanding() > 0 && start.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let back = a.take_returned();
    assert_eq!(back.len(), 1, "the dropped receive's buffer came back");
    let r = &back[0];
    assert_eq!(r.completion.status, WcStatus::SUCCESS);
    let OwnedBuf::Plain(buf) = &r.buf else {
        panic!("a receive's buffer comes back as it went in");
    };
    let n = r.completion.byte_len as usize;
    assert!(seen.insert(check(r.completion.peer.map(|p| p as usize), &buf[..n])));
    assert!(
        buf[n..].iter().all(|&b| b == 0xdd),
        "nothing past the message"
    );
    let expected: BTreeSet<_> = (0..6)
        .map(|q| (1, q))
        .chain((0..5).map(|q| (2, q)))
        .collect();
    assert_eq!(seen, expected, "all eleven, each once");
    for c in &canaries {
        assert!(c.iter().all(|&b| b == 0xcc), "a receive hit reused memory");
    }
}

async fn without_a_pool_receive_any_is_refused(tls: &str) {
    let w = world(2, tls, AsyncConfig::default());
    let a = &w[0];
    let f = a.receive_any(local(a, &[5; 64])).await.unwrap_err();
    assert!(matches!(f.error, TransportError::NoSharedPool), "{f}");
    assert_eq!(&f.buf[..], &[5; 64], "the buffer back, untouched");
    assert_eq!(a.outstanding(), 0);
    // And a pool refuses per-peer receives, as the scoped API does.
    let w = world_pooled(2, tls, AsyncConfig::default(), 4);
    let f = w[0].receive(1, local(&w[0], &[0; 8])).await.unwrap_err();
    assert!(
        matches!(f.error, TransportError::SharedPoolOnly { peer: 1 }),
        "{f}"
    );
}

macro_rules! on {
    ($tls:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn several_senders_into_one_pool() {
            super::several_senders_into_one_pool($tls).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_dropped_receive_any_loses_and_corrupts_nothing() {
            super::a_dropped_receive_any_loses_and_corrupts_nothing($tls).await;
        }

        #[tokio::test(flavor = "current_thread")]
        async fn without_a_pool_receive_any_is_refused() {
            super::without_a_pool_receive_any_is_refused($tls).await;
        }
    };
}

mod tcp {
    on!("tcp");
}

mod shared_memory {
    on!("sm,self");
}
