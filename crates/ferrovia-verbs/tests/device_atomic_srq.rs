//! Device tests of remote atomics and shared receive queues at the verbs
//! layer, on (soft-)RoCE. Run by `cargo xtask test`.

mod common;

use std::time::Duration;

use common::{Buf, WAIT, device, ok, one};
use ferrovia_verbs::{
    AccessFlags, AsyncEvent, CompletionQueue, ConnectOptions, ProtectionDomain, QpCaps, QueuePair,
    RecvWr, SendWr, SharedReceiveQueue, WcClass, WcOpcode,
};

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn fetch_add_and_compare_swap_return_the_original_value() {
    let p = common::Pair::new();
    assert!(
        p.ctx.query_device().unwrap().atomic_cap.supported(),
        "the test device runs atomics"
    );
    let target = Buf::new(
        &p.pd,
        64,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC,
    );
    let mut result = Buf::new(&p.pd, 8, AccessFlags::LOCAL_WRITE);
    let at = target.addr() + 8; // 8-byte aligned (Vec<u8> of 64 from malloc)
    assert_eq!(at % 8, 0);
    for i in 0..5u64 {
        let sge = [result.sge(0, 8)];
        // SAFETY: both buffers are registered and untouched until the
        // completion is taken below.
        unsafe {
            p.a.post_send(&mut SendWr::fetch_add(i, &sge, at, target.mr.rkey(), 10))
                .unwrap()
        };
        let wc = ok(&p.cq_a, i);
        assert_eq!(wc.opcode(), WcOpcode::Atomic);
        assert_eq!(
            u64::from_ne_bytes(result.data[..8].try_into().unwrap()),
            10 * i
        );
    }
    // Compare-and-swap: a wrong guess leaves the word, a right one swaps.
    for (n, (compare, swap, before)) in [(7, 99, 50), (50, 99, 50), (99, 1, 99)]
        .into_iter()
        .enumerate()
    {
        let sge = [result.sge(0, 8)];
        // SAFETY: as above.
        unsafe {
            p.a.post_send(&mut SendWr::compare_swap(
                100 + n as u64,
                &sge,
                at,
                target.mr.rkey(),
                compare,
                swap,
            ))
            .unwrap()
        };
        ok(&p.cq_a, 100 + n as u64);
        assert_eq!(
            u64::from_ne_bytes(result.data[..8].try_into().unwrap()),
            before
        );
    }
    result.data.fill(0);
    assert_eq!(
        u64::from_ne_bytes(target.data[8..16].try_into().unwrap()),
        1
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn an_atomic_on_memory_without_atomic_access_is_refused_by_the_peer() {
    let p = common::Pair::new();
    let target = Buf::new(
        &p.pd,
        64,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let result = Buf::new(&p.pd, 8, AccessFlags::LOCAL_WRITE);
    let sge = [result.sge(0, 8)];
    // SAFETY: as above.
    unsafe {
        p.a.post_send(&mut SendWr::fetch_add(
            1,
            &sge,
            target.addr(),
            target.mr.rkey(),
            1,
        ))
        .unwrap()
    };
    let wc = one(&p.cq_a);
    assert_eq!(
        wc.status().class(),
        WcClass::RemoteAccess,
        "{}",
        wc.status()
    );
}

/// A server with one SRQ shared by two QPs, each connected to a client.
struct Star {
    pd: ProtectionDomain,
    srq: SharedReceiveQueue,
    server_cq: CompletionQueue,
    servers: Vec<QueuePair>,
    client_cqs: Vec<CompletionQueue>,
    clients: Vec<QueuePair>,
}

fn star(clients: usize, srq_depth: u32) -> Star {
    let ctx = device();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let srq = SharedReceiveQueue::new(&pd, srq_depth, 1).unwrap();
    let server_cq = CompletionQueue::with_channel(&ctx, 512).unwrap();
    let mut servers = Vec::new();
    let mut client_cqs = Vec::new();
    let mut cs = Vec::new();
    for _ in 0..clients {
        let s = QueuePair::builder(&pd, &server_cq, &server_cq)
            .srq(&srq)
            .build()
            .unwrap();
        let cq = CompletionQueue::with_channel(&ctx, 256).unwrap();
        let c = QueuePair::builder(&pd, &cq, &cq)
            .caps(QpCaps::default())
            .build()
            .unwrap();
        s.connect(&c.endpoint(), &ConnectOptions::default())
            .unwrap();
        c.connect(&s.endpoint(), &ConnectOptions::default())
            .unwrap();
        servers.push(s);
        client_cqs.push(cq);
        cs.push(c);
    }
    Star {
        pd,
        srq,
        server_cq,
        servers,
        client_cqs,
        clients: cs,
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn receives_posted_once_to_a_shared_queue_serve_every_qp() {
    let st = star(3, 64);
    let inbox = Buf::new(&st.pd, 64 * 16, AccessFlags::LOCAL_WRITE);
    for i in 0..6u64 {
        let sge = [inbox.sge(i as usize * 16, 16)];
        // SAFETY: registered, untouched until every receive completed.
        unsafe { st.srq.post_recv(&mut RecvWr::new(1000 + i, &sge)).unwrap() };
    }
    let out = Buf::new(&st.pd, 16, AccessFlags::LOCAL_WRITE);
    for round in 0..2u64 {
        for (k, c) in st.clients.iter().enumerate() {
            let sge = [out.sge(0, 4)];
            // SAFETY: registered; completion taken before the next post.
            unsafe { c.post_send(&mut SendWr::send(round, &sge)).unwrap() };
            ok(&st.client_cqs[k], round);
        }
    }
    let mut from: Vec<u32> = (0..6)
        .map(|_| {
            let wc = one(&st.server_cq);
            wc.result().unwrap();
            assert_eq!(wc.byte_len(), 4);
            wc.qp_num()
        })
        .collect();
    from.sort_unstable();
    let mut expected: Vec<u32> = st
        .servers
        .iter()
        .flat_map(|s| [s.qp_num(), s.qp_num()])
        .collect();
    expected.sort_unstable();
    assert_eq!(from, expected, "each QP consumed two receives of the pool");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn the_low_watermark_raises_one_async_event() {
    let st = star(1, 16);
    let inbox = Buf::new(&st.pd, 16 * 8, AccessFlags::LOCAL_WRITE);
    for i in 0..8u64 {
        let sge = [inbox.sge(i as usize * 8, 8)];
        // SAFETY: as above.
        unsafe { st.srq.post_recv(&mut RecvWr::new(i, &sge)).unwrap() };
    }
    st.srq.arm_limit(4).unwrap();
    let ctx = st.pd.context();
    assert_eq!(
        ctx.next_async_event(Duration::from_millis(50)).unwrap(),
        None
    );
    let out = Buf::new(&st.pd, 8, AccessFlags::LOCAL_WRITE);
    for i in 0..5u64 {
        let sge = [out.sge(0, 8)];
        // SAFETY: as above.
        unsafe { st.clients[0].post_send(&mut SendWr::send(i, &sge)).unwrap() };
        ok(&st.client_cqs[0], i);
        one(&st.server_cq).result().unwrap();
    }
    // 3 receives left, under the limit of 4.
    let ev = ctx.next_async_event(WAIT).unwrap();
    assert_eq!(
        ev,
        Some(AsyncEvent::SrqLimitReached {
            srq: st.srq.as_raw() as usize
        })
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn qps_moved_to_error_take_no_more_shared_receives() {
    let st = star(2, 16);
    let inbox = Buf::new(&st.pd, 64, AccessFlags::LOCAL_WRITE);
    for i in 0..4u64 {
        let sge = [inbox.sge(i as usize * 16, 16)];
        // SAFETY: as above.
        unsafe { st.srq.post_recv(&mut RecvWr::new(i, &sge)).unwrap() };
    }
    for s in &st.servers {
        s.to_error().unwrap();
    }
    // Devices that raise LAST_WQE_REACHED do so now; soft-RoCE does not
    // (rdma_rxe in Debian 12's kernel), so this only checks that nothing
    // else arrives.
    let ctx = st.pd.context();
    while let Some(ev) = ctx.next_async_event(Duration::from_millis(300)).unwrap() {
        assert!(matches!(ev, AsyncEvent::LastWqeReached { .. }), "{ev:?}");
    }
    // Moving the QPs to error consumed and flushed no pool receive: they
    // stay in the pool, untouched.
    let mut wc = [ferrovia_verbs::WorkCompletion::default()];
    assert_eq!(
        st.server_cq.poll(&mut wc).unwrap(),
        0,
        "a pool receive was touched"
    );
}
