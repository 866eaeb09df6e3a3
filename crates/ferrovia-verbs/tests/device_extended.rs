//! Device tests of the extended verbs: queue pairs posted through
//! `ibv_wr_*` and completion queues polled through `ibv_start_poll`
//! (soft-RoCE offers both), the classic paths beside them, and the typed
//! absence of completion timestamps. Run by `cargo xtask test`.

mod common;

use common::{Buf, Pair, ok, pattern};
use ferrovia_verbs::{
    AccessFlags, CompletionQueue, CqOptions, PollPath, PostPath, RecvWr, SendWr, VerbsError,
    WcOpcode, link_send,
};

/// Every RC operation once through `p`, checked end to end.
fn every_operation(p: &Pair) {
    let mut src = Buf::new(&p.pd, 4096, AccessFlags::NONE);
    let mut dst = Buf::new(
        &p.pd,
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    );
    let word = Buf::new(
        &p.pd,
        8,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC,
    );
    let result = Buf::new(&p.pd, 8, AccessFlags::LOCAL_WRITE);
    src.data.copy_from_slice(&pattern(4096, 3));

    // A send with an immediate, and an inline one.
    let rs = [dst.sge(0, 4096)];
    let ss = [src.sge(0, 100)];
    // SAFETY: registered buffers, untouched until the completions below.
    unsafe {
        p.b.post_recv(&mut RecvWr::new(1, &rs)).unwrap();
        p.a.post_send(&mut SendWr::send_with_imm(2, &ss, 0xabcd))
            .unwrap();
    }
    ok(&p.cq_a, 2);
    let wc = ok(&p.cq_b, 1);
    assert_eq!(
        (wc.opcode(), wc.byte_len(), wc.imm_data()),
        (WcOpcode::Recv, 100, Some(0xabcd))
    );
    assert_eq!(wc.qp_num(), p.b.qp_num());
    assert_eq!(dst.data[..100], src.data[..100]);
    let rs = [dst.sge(0, 4096)];
    let ss = [src.sge(100, 32)];
    // SAFETY: as above; the inline payload is copied at post time.
    unsafe {
        p.b.post_recv(&mut RecvWr::new(3, &rs)).unwrap();
        p.a.post_send(&mut SendWr::send(4, &ss).inline(true))
            .unwrap();
    }
    ok(&p.cq_a, 4);
    assert_eq!(ok(&p.cq_b, 3).byte_len(), 32);
    assert_eq!(dst.data[..32], src.data[100..132]);
    // Inline from two parts: soft-RoCE's inline list setter (rdma-core <
    // 64) would send nothing; the extended path gathers them first.
    let rs = [dst.sge(0, 4096)];
    let ss = [src.sge(200, 20), src.sge(300, 12)];
    // SAFETY: as above.
    unsafe {
        p.b.post_recv(&mut RecvWr::new(5, &rs)).unwrap();
        p.a.post_send(&mut SendWr::send(6, &ss).inline(true))
            .unwrap();
    }
    ok(&p.cq_a, 6);
    assert_eq!(ok(&p.cq_b, 5).byte_len(), 32);
    assert_eq!(dst.data[..20], src.data[200..220]);
    assert_eq!(dst.data[20..32], src.data[300..312]);
    // Two elements, not inline (rxe < 64's wr_set_sge_list miscounts
    // them: this request takes ibv_post_send).
    let rs = [dst.sge(0, 4096)];
    let ss = [src.sge(1000, 1000), src.sge(3000, 500)];
    // SAFETY: as above.
    unsafe {
        p.b.post_recv(&mut RecvWr::new(7, &rs)).unwrap();
        p.a.post_send(&mut SendWr::send(8, &ss)).unwrap();
    }
    ok(&p.cq_a, 8);
    assert_eq!(ok(&p.cq_b, 7).byte_len(), 1500);
    assert_eq!(dst.data[..1000], src.data[1000..2000]);
    assert_eq!(dst.data[1000..1500], src.data[3000..3500]);

    // A list of writes (one doorbell, the last signalled), then a write
    // with an immediate that tells the peer.
    dst.data.fill(0);
    let parts: Vec<[ferrovia_verbs::Sge; 1]> = (0..4).map(|i| [src.sge(i * 1024, 1024)]).collect();
    let mut wrs: Vec<SendWr<'_>> = parts
        .iter()
        .enumerate()
        .map(|(i, s)| {
            SendWr::write(
                10 + i as u64,
                s,
                dst.addr() + i as u64 * 1024,
                dst.mr.rkey(),
            )
            .signaled(i == 3)
        })
        .collect();
    link_send(&mut wrs);
    // SAFETY: as above.
    unsafe { p.a.post_send(&mut wrs[0]).unwrap() };
    ok(&p.cq_a, 13);
    // Several completions taken by one poll (soft-RoCE < 55 loses one
    // after ibv_next_poll finds the queue empty: never used).
    for round in 0..3u64 {
        let rs = [dst.sge(0, 4096)];
        let ss = [src.sge(0, 16)];
        // SAFETY: as above.
        unsafe {
            for i in 0..4 {
                p.b.post_recv(&mut RecvWr::new(100 + round * 10 + i, &rs))
                    .unwrap();
            }
            for i in 0..4 {
                p.a.post_send(&mut SendWr::send(200 + round * 10 + i, &ss))
                    .unwrap();
            }
        }
        let mut taken = Vec::new();
        let mut wcs = [ferrovia_verbs::WorkCompletion::default(); 32];
        let deadline = std::time::Instant::now() + common::WAIT;
        while taken.len() < 4 && std::time::Instant::now() < deadline {
            let n = p.cq_b.poll(&mut wcs).unwrap();
            taken.extend(wcs[..n].iter().map(|w| w.wr_id()));
        }
        assert_eq!(
            taken,
            (0..4).map(|i| 100 + round * 10 + i).collect::<Vec<_>>()
        );
        let mut sent = 0;
        while sent < 4 && std::time::Instant::now() < deadline {
            sent += p.cq_a.poll(&mut wcs).unwrap();
        }
        assert_eq!(sent, 4);
    }
    dst.data.fill(0);
    // SAFETY: as above (the list's writes landed already, refilled here).
    unsafe { p.a.post_send(&mut wrs[0]).unwrap() };
    ok(&p.cq_a, 13);
    let rs = [dst.sge(0, 1)];
    let ss = [src.sge(0, 8)];
    // SAFETY: as above.
    unsafe {
        p.b.post_recv(&mut RecvWr::new(20, &rs)).unwrap();
        p.a.post_send(&mut SendWr::write_with_imm(
            21,
            &ss,
            dst.addr(),
            dst.mr.rkey(),
            77,
        ))
        .unwrap();
    }
    ok(&p.cq_a, 21);
    let wc = ok(&p.cq_b, 20);
    assert_eq!(
        (wc.opcode(), wc.imm_data()),
        (WcOpcode::RecvRdmaWithImm, Some(77))
    );
    assert_eq!(dst.data, src.data, "the written bytes");

    // A read back, and an atomic.
    let mut back = Buf::new(&p.pd, 4096, AccessFlags::LOCAL_WRITE);
    let bs = [back.sge(0, 4096)];
    // SAFETY: as above.
    unsafe {
        p.a.post_send(&mut SendWr::read(30, &bs, dst.addr(), dst.mr.rkey()))
            .unwrap()
    };
    ok(&p.cq_a, 30);
    assert_eq!(back.data, src.data, "the read bytes");
    back.data.fill(0);
    let rs = [result.sge(0, 8)];
    // SAFETY: as above.
    unsafe {
        p.a.post_send(&mut SendWr::fetch_add(
            31,
            &rs,
            word.addr(),
            word.mr.rkey(),
            5,
        ))
        .unwrap();
        p.a.post_send(&mut SendWr::fetch_add(
            32,
            &rs,
            word.addr(),
            word.mr.rkey(),
            5,
        ))
        .unwrap();
    }
    assert_eq!(ok(&p.cq_a, 31).opcode(), WcOpcode::Atomic);
    ok(&p.cq_a, 32);
    assert_eq!(u64::from_ne_bytes(result.data[..8].try_into().unwrap()), 5);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn extended_queue_pairs_and_completion_queues_run_every_operation() {
    let p = Pair::with_paths(PostPath::Extended, PollPath::Extended);
    assert_eq!(p.a.post_path(), PostPath::Extended);
    assert_eq!(p.cq_a.poll_path(), PollPath::Extended);
    every_operation(&p);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn classic_paths_run_every_operation() {
    let p = Pair::with_paths(PostPath::Classic, PollPath::Classic);
    assert_eq!(p.a.post_path(), PostPath::Classic);
    assert_eq!(p.cq_a.poll_path(), PollPath::Classic);
    every_operation(&p);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn auto_takes_the_extended_paths_where_offered() {
    let p = Pair::new();
    assert_eq!(
        p.a.post_path(),
        PostPath::Extended,
        "soft-RoCE offers ibv_wr_*"
    );
    assert_eq!(
        p.cq_a.poll_path(),
        PollPath::Extended,
        "soft-RoCE offers ibv_start_poll"
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_failed_request_completes_with_its_status_on_the_extended_cq() {
    let p = Pair::with_paths(PostPath::Extended, PollPath::Extended);
    let src = Buf::new(&p.pd, 64, AccessFlags::NONE);
    let ss = [src.sge(0, 64)];
    // SAFETY: registered buffer; the bad rkey fails at the peer.
    unsafe {
        p.a.post_send(&mut SendWr::write(5, &ss, 0x1000, 0xdead_beef))
            .unwrap()
    };
    let wc = common::one(&p.cq_a);
    assert_eq!(wc.wr_id(), 5);
    assert_eq!(
        wc.status(),
        ferrovia_verbs::WcStatus::REM_ACCESS_ERR,
        "{}",
        wc.status()
    );
    assert_eq!(wc.qp_num(), p.a.qp_num());
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn completion_timestamps_are_refused_by_name_and_leave_nothing() {
    let ctx = common::device();
    let caps = ctx.query_device_ex().unwrap();
    assert!(caps.extended_query, "soft-RoCE answers ibv_query_device_ex");
    assert_eq!(
        caps.completion_timestamp_mask, 0,
        "soft-RoCE stamps nothing"
    );
    let before = common::resources(ctx.name());
    for channel in [false, true] {
        let opts = CqOptions::default().channel(channel).timestamps(true);
        match CompletionQueue::with_options(&ctx, 16, &opts) {
            Err(VerbsError::Unsupported {
                device,
                what,
                detail,
            }) => {
                assert_eq!(device, ctx.name());
                assert_eq!(what, "completion timestamps");
                assert!(detail.contains("completion_timestamp_mask"), "{detail}");
            }
            other => panic!("expected a typed refusal, got {other:?}"),
        }
    }
    assert_eq!(
        common::resources(ctx.name()),
        before,
        "the refusal created nothing"
    );
    // A CQ without timestamps still says so when asked for them.
    let cq = CompletionQueue::with_options(&ctx, 16, &CqOptions::default()).unwrap();
    assert!(!cq.has_timestamps());
    let mut wcs = [ferrovia_verbs::WorkCompletion::default(); 1];
    assert!(cq.poll_timestamped(&mut wcs, &mut [0u64; 1]).is_err());
}
