//! Device tests of the registry: real registrations on (soft-)RoCE, data
//! moved through views. Run by `cargo xtask test`.

use std::time::Duration;

use ferrovia_mr::{MrError, RegisterOptions};
use ferrovia_verbs::{
    CompletionQueue, ConnectOptions, Context, ProtectionDomain, QueuePair, SendWr, Sge,
    WorkCompletion,
};
use ferrovia_verbs_transport::registry;

struct Loop {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    _peer: QueuePair,
}

/// One QP connected to a second one on the same device; the first posts.
fn connected() -> Loop {
    let ctx = Context::open_default()
        .unwrap_or_else(|e| panic!("device test found no usable RDMA device: {e}"));
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let cq = CompletionQueue::with_channel(&ctx, 64).unwrap();
    let peer_cq = CompletionQueue::new(&ctx, 64).unwrap();
    let qp = QueuePair::builder(&pd, &cq, &cq).build().unwrap();
    let peer = QueuePair::builder(&pd, &peer_cq, &peer_cq).build().unwrap();
    qp.connect(&peer.endpoint(), &ConnectOptions::default())
        .unwrap();
    peer.connect(&qp.endpoint(), &ConnectOptions::default())
        .unwrap();
    Loop {
        pd,
        cq,
        qp,
        _peer: peer,
    }
}

fn complete(l: &Loop, wr_id: u64) {
    let mut wc = [WorkCompletion::default()];
    l.cq.wait(&mut wc, Duration::from_secs(20)).unwrap();
    if let Err(e) = wc[0].result() {
        panic!("wr {wr_id}: {e}");
    }
    assert_eq!(wc[0].wr_id(), wr_id);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn zero_based_64mib_segment_moves_the_right_bytes_through_views() {
    let l = connected();
    let reg = registry(&l.pd);
    const SEG: usize = 64 << 20;
    let opts = RegisterOptions::local()
        .allow_remote_read()
        .allow_remote_write()
        .zero_based();
    let arena = reg.alloc(SEG, opts).unwrap();
    let base = arena.addr();
    assert_eq!(arena.registration().view().rdma_addr, 0);
    let mut staging = reg
        .register_buffer(vec![0u8; 1 << 20], RegisterOptions::local())
        .unwrap();

    for (n, &(offset, len)) in [
        (0usize, 4096usize),
        (4096, 1),
        (1 << 20, 65536),
        ((7 << 20) + 17, 1000),
        (SEG - 8192, 8192),
    ]
    .iter()
    .enumerate()
    {
        let view = reg.view(base + offset, len).unwrap();
        assert_eq!(
            view.rdma_addr, offset,
            "zero-based: rdma address is the offset"
        );
        let remote = view.remote().unwrap();
        // Write `len` bytes of a pattern from staging into the arena view.
        let pattern: Vec<u8> = (0..len).map(|i| (i * 7 + n) as u8).collect();
        staging[..len].copy_from_slice(&pattern);
        let src = reg.view(staging.as_ptr() as usize, len).unwrap();
        let sge = [Sge::new(src.rdma_addr as u64, len as u32, src.lkey)];
        // SAFETY: both buffers are registered and untouched until completion.
        unsafe {
            l.qp.post_send(&mut SendWr::write(
                2 * n as u64,
                &sge,
                remote.addr(),
                remote.rkey(),
            ))
            .unwrap()
        };
        complete(&l, 2 * n as u64);
        let mut landed = vec![0u8; len];
        arena.read_into(offset, &mut landed).unwrap();
        assert_eq!(landed, pattern, "write at offset {offset}");

        // Read it back through the view into a cleared staging buffer.
        staging[..len].fill(0);
        let sge = [Sge::new(src.rdma_addr as u64, len as u32, src.lkey)];
        // SAFETY: as above.
        unsafe {
            l.qp.post_send(&mut SendWr::read(
                2 * n as u64 + 1,
                &sge,
                remote.addr(),
                remote.rkey(),
            ))
            .unwrap()
        };
        complete(&l, 2 * n as u64 + 1);
        assert_eq!(&staging[..len], &pattern[..], "read at offset {offset}");
    }
    // Bytes outside the written views stayed zero.
    let mut untouched = vec![1u8; (1 << 20) - 8192];
    arena.read_into(8192, &mut untouched).unwrap();
    assert!(untouched.iter().all(|&b| b == 0));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_view_beyond_coverage_is_refused_before_anything_is_posted() {
    let l = connected();
    let reg = registry(&l.pd);
    let seg = reg
        .register_buffer(
            vec![0u8; 1 << 20],
            RegisterOptions::local().allow_remote_write(),
        )
        .unwrap();
    let end = seg.addr() + (1 << 20);
    assert!(matches!(
        reg.view(end - 100, 200),
        Err(MrError::OutOfRange { .. })
    ));
    assert!(matches!(
        reg.view(end + 4096, 1),
        Err(MrError::NotRegistered { .. })
    ));
    assert!(matches!(
        seg.registration().view_at(1 << 20, 1),
        Err(MrError::OutOfRange { .. })
    ));
    let remote = seg.registration().remote().unwrap();
    assert!(matches!(
        remote.sub_region(1 << 20, 1),
        Err(MrError::OutOfRange { .. })
    ));
    // Nothing reached the send queue: the CQ is empty.
    let mut wc = [WorkCompletion::default()];
    assert_eq!(l.cq.poll(&mut wc).unwrap(), 0);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn eight_threads_register_and_look_up_with_exact_counters() {
    let l = connected();
    ferrovia_testkit::eight_threads_register_and_look_up(&registry(&l.pd), 16, 500);
}
