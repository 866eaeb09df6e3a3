//! The two ways a post reaches the UCX worker: issued by the posting
//! thread itself while it holds the engine, or queued as a command when
//! another thread holds it (here: a test holding the engine, as the
//! progress thread would); ordering holds across both, and one endpoint
//! flush covers a list of writes.

mod common;

use common::*;
use ferrovia_channel::{
    Gather, PeerReceiveWorkRequest, PeerSendWorkRequest, PeerWriteWorkRequest, ReceiveWorkRequest,
    Scatter, SendWorkRequest, TransportError, WriteWorkRequest,
};
use ferrovia_mr::{RegisterOptions, RegisteredBuffer};
use ferrovia_ucx::UcxTransport;

/// Messages queued while the engine was held, then messages posted
/// directly, arrive in posting order; so do writes, which a later send
/// does not overtake.
fn queued_and_direct_posts_keep_posting_order(tls: &str) {
    const EACH: usize = 6;
    let mut w = world_on(2, tls, UcxTransport::builder);
    let (b, _t_b) = w.pop().expect("rank 1");
    let (mut a, t_a) = w.pop().expect("rank 0");
    let numbers: Vec<RegisteredBuffer> = (0..2 * EACH as u64)
        .map(|i| buf(&a, &i.to_le_bytes(), RegisterOptions::local()))
        .collect();
    let mut inbox = buf(&b, &[0; 8 * 2 * EACH + 8], RegisterOptions::local());
    let target = buf(&b, &[0; 8 * 2 * EACH], rw());
    let remote = target.registration().remote().unwrap();
    // The key is fetched once, so the writes below need no round trip.
    let warm = buf(&a, &[0; 8], RegisterOptions::local());
    assert_eq!(write(&mut a, &warm, remote), Ok(()));
    let mut b = b;
    b.scope(|rx| {
        let (bytes, reg) = inbox.split_mut();
        let (messages, last) = bytes.split_at_mut(8 * 2 * EACH);
        let recvs = messages
            .chunks_mut(8)
            .map(|c| {
                rx.post_receive(PeerReceiveWorkRequest::new(
                    0,
                    ReceiveWorkRequest::new(Scatter::new(reg, c)?),
                ))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let fence = rx.post_receive(PeerReceiveWorkRequest::new(
            0,
            ReceiveWorkRequest::new(Scatter::new(reg, last)?),
        ))?;
        a.scope(|tx| {
            let before = t_a.post_stats();
            let mut post = |i: usize| -> Result<(), TransportError> {
                let g = [Gather::of(&numbers[i])?];
                drop(tx.post_send(PeerSendWorkRequest::new(1, SendWorkRequest::new(&g)?))?);
                let at = remote.sub_region(8 * i as u64, 8).expect("inside");
                drop(tx.post_write(PeerWriteWorkRequest::new(1, WriteWorkRequest::new(&g, at)?))?);
                Ok(())
            };
            {
                let _held = t_a.stall_progress();
                (0..EACH).try_for_each(&mut post)?;
            }
            let queued = t_a.post_stats();
            assert_eq!(
                queued.queued - before.queued,
                2 * EACH as u64,
                "with the engine held, every post is queued"
            );
            // Let the progress thread drain the queue and go idle, so the
            // lock is free when the next posts try it (whether a post finds
            // it free is otherwise a race with the thread's turns).
            std::thread::sleep(std::time::Duration::from_millis(50));
            (EACH..2 * EACH).try_for_each(&mut post)?;
            let g = [Gather::of(&warm)?];
            tx.post_send(PeerSendWorkRequest::new(
                1,
                SendWorkRequest::new(&g)?.with_imm(7),
            ))?
            .wait(WAIT)?;
            assert!(
                t_a.post_stats().direct > queued.direct,
                "with the engine free, posts are issued directly"
            );
            Ok::<_, TransportError>(())
        })
        .map_err(|e| TransportError::Config(e.to_string()))?;
        for (i, h) in recvs.into_iter().enumerate() {
            let d = h.wait(WAIT)?;
            let v = u64::from_le_bytes(d.into_received().unwrap().try_into().unwrap());
            assert_eq!(v, i as u64, "messages arrive in posting order");
        }
        assert_eq!(fence.wait(WAIT)?.imm(), Some(7));
        Ok::<_, TransportError>(())
    })
    .unwrap();
    // The send after the writes arrived, so the writes have landed.
    let mut landed = vec![0u8; 8 * 2 * EACH];
    target.read_into(0, &mut landed).unwrap();
    for (i, word) in landed.chunks(8).enumerate() {
        assert_eq!(word, (i as u64).to_le_bytes(), "write {i} landed");
    }
}

#[test]
fn queued_and_direct_posts_keep_posting_order_over_tcp() {
    queued_and_direct_posts_keep_posting_order("tcp");
}

#[test]
fn queued_and_direct_posts_keep_posting_order_over_shared_memory() {
    queued_and_direct_posts_keep_posting_order(SHARED_MEMORY);
}

/// A list of 16 writes costs one endpoint flush, whether its posts were
/// queued or issued directly, and completes only once the writes landed.
fn a_list_of_writes_costs_one_flush(tls: &str) {
    let mut w = world_on(2, tls, UcxTransport::builder);
    let (_b, _t_b) = w.pop().expect("rank 1");
    let (mut a, t_a) = w.pop().expect("rank 0");
    let target = buf(&_b, &[0; 16 * 64], rw());
    let remote = target.registration().remote().unwrap();
    let warm = buf(&a, &[0; 8], RegisterOptions::local());
    assert_eq!(write(&mut a, &warm, remote), Ok(()));
    let sources: Vec<RegisteredBuffer> = (0..16u8)
        .map(|i| buf(&a, &[i + 1; 64], RegisterOptions::local()))
        .collect();
    for held in [true, false] {
        a.scope(|tx| {
            let gathers: Vec<[Gather; 1]> = sources
                .iter()
                .map(|s| Gather::of(s).map(|g| [g]))
                .collect::<Result<_, _>>()?;
            let wrs = gathers
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    WriteWorkRequest::new(g, remote.sub_region(64 * i as u64, 64).unwrap())
                })
                .collect::<Result<Vec<_>, _>>()?;
            let before = t_a.post_stats();
            let list = if held {
                let _held = t_a.stall_progress();
                tx.post_write_list(1, &wrs)?
            } else {
                tx.post_write_list(1, &wrs)?
            };
            list.wait(WAIT)?;
            let after = t_a.post_stats();
            if held || after.direct > before.direct {
                assert_eq!(
                    after.endpoint_flushes - before.endpoint_flushes,
                    1,
                    "one flush for the list (queued: {held})"
                );
            }
            Ok::<_, TransportError>(())
        })
        .unwrap();
        // Remote completion: the list completed, so every write landed.
        let mut landed = vec![0u8; 16 * 64];
        target.read_into(0, &mut landed).unwrap();
        for (i, chunk) in landed.chunks(64).enumerate() {
            assert!(chunk.iter().all(|&x| x == i as u8 + 1), "write {i} landed");
        }
    }
}

#[test]
fn a_list_of_writes_costs_one_flush_over_tcp() {
    a_list_of_writes_costs_one_flush("tcp");
}

#[test]
fn a_list_of_writes_costs_one_flush_over_shared_memory() {
    a_list_of_writes_costs_one_flush(SHARED_MEMORY);
}
