//! Device tests: real verbs on a real (soft-)RoCE device. Run by
//! `cargo xtask test`; ignored under plain `cargo test`.

mod common;

use std::time::{Duration, Instant};

use common::{Buf, Pair, SIZES, ok, one, pattern};
use ferrovia_verbs::{
    AccessFlags, LinkLayer, RecvWr, SendWr, VerbsError, WcClass, WcOpcode, WorkCompletion,
};

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn device_ports_and_gids() {
    let ctx = common::device();
    let dev = ctx.query_device().unwrap();
    assert!(dev.phys_port_cnt >= 1);
    assert!(dev.max_qp_wr > 0 && dev.max_sge > 0);
    let port = ctx.active_port().unwrap();
    assert!(port.is_active());
    let gids = ctx.gid_table(port.port).unwrap();
    assert!(!gids.is_empty(), "empty GID table");
    if port.link_layer == LinkLayer::Ethernet {
        let g = ctx.pick_gid(port.port).unwrap();
        assert!(g.gid.is_ipv4_mapped(), "picked {g:?} from {gids:?}");
    }
    let names: Vec<_> = ferrovia_verbs::devices()
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert!(names.contains(&ctx.name().to_owned()));
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn send_recv_all_sizes() {
    let p = Pair::new();
    let max = *SIZES.last().unwrap();
    let src = Buf::new(&p.pd, max, AccessFlags::NONE);
    let mut dst = Buf::new(&p.pd, max, AccessFlags::LOCAL_WRITE);
    let mut src = src;
    for (i, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, i as u8);
        src.data[..len].copy_from_slice(&data);
        dst.data.fill(0);
        let rs = [dst.sge(0, max)];
        let ss = [src.sge(0, len)];
        // SAFETY: both buffers are registered and untouched until the
        // completions below.
        unsafe {
            p.b.post_recv(&mut RecvWr::new(100 + i as u64, &rs))
                .unwrap();
            p.a.post_send(&mut SendWr::send(200 + i as u64, &ss))
                .unwrap();
        }
        ok(&p.cq_a, 200 + i as u64);
        let wc = ok(&p.cq_b, 100 + i as u64);
        assert_eq!(wc.opcode(), WcOpcode::Recv);
        assert_eq!(wc.byte_len() as usize, len);
        assert_eq!(wc.imm_data(), None);
        assert_eq!(&dst.data[..len], &data[..], "size {len}");
        assert!(
            dst.data[len..].iter().all(|&b| b == 0),
            "bytes past {len} were written"
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn send_with_immediate() {
    let p = Pair::new();
    let mut src = Buf::new(&p.pd, 256, AccessFlags::NONE);
    let dst = Buf::new(&p.pd, 256, AccessFlags::LOCAL_WRITE);
    src.data.copy_from_slice(&pattern(256, 9));
    let rs = [dst.sge(0, 256)];
    let ss = [src.sge(0, 256)];
    // SAFETY: registered buffers, untouched until completion.
    unsafe {
        p.b.post_recv(&mut RecvWr::new(1, &rs)).unwrap();
        p.a.post_send(&mut SendWr::send_with_imm(2, &ss, 0xfeed_beef))
            .unwrap();
    }
    ok(&p.cq_a, 2);
    let wc = ok(&p.cq_b, 1);
    assert_eq!(wc.imm_data(), Some(0xfeed_beef));
    assert_eq!(dst.data, src.data);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn rdma_write_all_sizes() {
    let p = Pair::new();
    let max = *SIZES.last().unwrap();
    let mut src = Buf::new(&p.pd, max, AccessFlags::NONE);
    let mut dst = Buf::new(
        &p.pd,
        max,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    for (i, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, 50 + i as u8);
        src.data[..len].copy_from_slice(&data);
        dst.data.fill(0);
        let ss = [src.sge(0, len)];
        // SAFETY: registered buffers, untouched until completion.
        unsafe {
            p.a.post_send(&mut SendWr::write(i as u64, &ss, dst.addr(), dst.mr.rkey()))
                .unwrap()
        };
        let wc = ok(&p.cq_a, i as u64);
        assert_eq!(wc.opcode(), WcOpcode::RdmaWrite);
        assert_eq!(&dst.data[..len], &data[..], "size {len}");
        assert!(dst.data[len..].iter().all(|&b| b == 0));
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn rdma_write_with_immediate() {
    let p = Pair::new();
    let mut src = Buf::new(&p.pd, 4096, AccessFlags::NONE);
    let dst = Buf::new(
        &p.pd,
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    src.data.copy_from_slice(&pattern(4096, 3));
    let no_sges: [ferrovia_verbs::Sge; 0] = [];
    let ss = [src.sge(0, 4096)];
    // SAFETY: registered buffers, untouched until completion.
    unsafe {
        p.b.post_recv(&mut RecvWr::new(7, &no_sges)).unwrap();
        p.a.post_send(&mut SendWr::write_with_imm(
            8,
            &ss,
            dst.addr(),
            dst.mr.rkey(),
            12345,
        ))
        .unwrap();
    }
    ok(&p.cq_a, 8);
    let wc = ok(&p.cq_b, 7);
    assert_eq!(wc.opcode(), WcOpcode::RecvRdmaWithImm);
    assert_eq!(wc.imm_data(), Some(12345));
    assert_eq!(wc.byte_len(), 4096);
    assert_eq!(dst.data, src.data);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn rdma_read_all_sizes() {
    let p = Pair::new();
    let max = *SIZES.last().unwrap();
    let mut remote = Buf::new(&p.pd, max, AccessFlags::REMOTE_READ);
    let mut local = Buf::new(&p.pd, max, AccessFlags::LOCAL_WRITE);
    for (i, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, 90 + i as u8);
        remote.data[..len].copy_from_slice(&data);
        local.data.fill(0);
        let ls = [local.sge(0, len)];
        // SAFETY: registered buffers, untouched until completion.
        unsafe {
            p.a.post_send(&mut SendWr::read(
                i as u64,
                &ls,
                remote.addr(),
                remote.mr.rkey(),
            ))
            .unwrap()
        };
        let wc = ok(&p.cq_a, i as u64);
        assert_eq!(wc.opcode(), WcOpcode::RdmaRead);
        assert_eq!(&local.data[..len], &data[..], "size {len}");
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn thousand_mixed_operations() {
    let p = Pair::new();
    const MAX: usize = 8192;
    let mut a = Buf::new(&p.pd, MAX, AccessFlags::ALL_REMOTE);
    let mut b = Buf::new(&p.pd, MAX, AccessFlags::ALL_REMOTE);
    let mut wcs = [WorkCompletion::default(); 4];
    for i in 0..1000u64 {
        let len = 1 + (i as usize * 997) % MAX;
        let data = pattern(len, i as u8);
        match i % 3 {
            0 => {
                a.data[..len].copy_from_slice(&data);
                let rs = [b.sge(0, MAX)];
                let ss = [a.sge(0, len)];
                // SAFETY: registered, untouched until completion.
                unsafe {
                    p.b.post_recv(&mut RecvWr::new(i, &rs)).unwrap();
                    p.a.post_send(&mut SendWr::send(i, &ss)).unwrap();
                }
                ok(&p.cq_a, i);
                assert_eq!(ok(&p.cq_b, i).byte_len() as usize, len);
            }
            1 => {
                a.data[..len].copy_from_slice(&data);
                let ss = [a.sge(0, len)];
                // SAFETY: registered, untouched until completion.
                unsafe {
                    p.a.post_send(&mut SendWr::write(i, &ss, b.addr(), b.mr.rkey()))
                        .unwrap()
                };
                ok(&p.cq_a, i);
            }
            _ => {
                b.data[..len].copy_from_slice(&data);
                let ls = [a.sge(0, len)];
                // SAFETY: registered, untouched until completion.
                unsafe {
                    p.a.post_send(&mut SendWr::read(i, &ls, b.addr(), b.mr.rkey()))
                        .unwrap()
                };
                ok(&p.cq_a, i);
                assert_eq!(&a.data[..len], &data[..], "read {i}");
                continue;
            }
        }
        assert_eq!(&b.data[..len], &data[..], "op {i}");
        assert_eq!(
            p.cq_a.poll(&mut wcs).unwrap(),
            0,
            "stray completion after op {i}"
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn wrong_rkey_is_a_remote_access_error() {
    let p = Pair::new();
    let src = Buf::new(&p.pd, 64, AccessFlags::NONE);
    let dst = Buf::new(
        &p.pd,
        64,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let ss = [src.sge(0, 64)];
    let bad_rkey = dst.mr.rkey() ^ 0x5a5a_0000;
    // SAFETY: registered buffers; the write is refused by the responder.
    unsafe {
        p.a.post_send(&mut SendWr::write(77, &ss, dst.addr(), bad_rkey))
            .unwrap()
    };
    let wc = one(&p.cq_a);
    let err = wc.result().unwrap_err();
    assert_eq!(err.wr_id, 77);
    assert_eq!(err.status.class(), WcClass::RemoteAccess, "{err}");
    let typed: VerbsError = err.into();
    assert!(
        typed.to_string().contains("IBV_WC_REM_ACCESS_ERR"),
        "{typed}"
    );
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn sge_outside_its_registration_is_a_local_protection_error() {
    let p = Pair::new();
    let src = Buf::new(&p.pd, 4096, AccessFlags::NONE);
    let dst = Buf::new(
        &p.pd,
        8192,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    // 4 KiB starting 2 KiB into a 4 KiB registration: half of it is outside.
    let ss = [src.sge(2048, 4096)];
    // SAFETY: the device checks the SGE against the MR and refuses it; no
    // memory outside the registration is touched.
    unsafe {
        p.a.post_send(&mut SendWr::write(5, &ss, dst.addr(), dst.mr.rkey()))
            .unwrap()
    };
    let wc = one(&p.cq_a);
    let err = wc.result().unwrap_err();
    assert_eq!(err.status.class(), WcClass::LocalProtection, "{err}");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn wait_on_idle_cq_times_out_on_time() {
    let p = Pair::new();
    let mut wc = [WorkCompletion::default(); 8];
    for timeout in [Duration::from_millis(50), Duration::from_millis(300)] {
        let start = Instant::now();
        let r = p.cq_a.wait(&mut wc, timeout);
        let took = start.elapsed();
        assert!(matches!(r, Err(VerbsError::Timeout { .. })), "{r:?}");
        assert!(took >= timeout, "returned early: {took:?} < {timeout:?}");
        assert!(
            took <= timeout + Duration::from_millis(100),
            "returned late: {took:?}"
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn wait_wakes_for_a_completion_that_arrives_later() {
    let p = Pair::new();
    let src = Buf::new(&p.pd, 64, AccessFlags::NONE);
    let dst = Buf::new(&p.pd, 64, AccessFlags::LOCAL_WRITE);
    let rs = [dst.sge(0, 64)];
    // SAFETY: registered, untouched until completion.
    unsafe { p.b.post_recv(&mut RecvWr::new(1, &rs)).unwrap() };
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            let ss = [src.sge(0, 64)];
            // SAFETY: registered, untouched until completion.
            unsafe { p.a.post_send(&mut SendWr::send(2, &ss)).unwrap() };
        });
        let start = Instant::now();
        let wc = ok(&p.cq_b, 1);
        assert_eq!(wc.byte_len(), 64);
        assert!(start.elapsed() >= Duration::from_millis(150));
    });
    ok(&p.cq_a, 2);
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn error_state_flushes_outstanding_receives() {
    let p = Pair::new();
    let dst = Buf::new(&p.pd, 64, AccessFlags::LOCAL_WRITE);
    let rs = [dst.sge(0, 64)];
    // SAFETY: registered, untouched until the flush completion.
    unsafe { p.b.post_recv(&mut RecvWr::new(9, &rs)).unwrap() };
    p.b.to_error().unwrap();
    assert_eq!(p.b.state().unwrap(), ferrovia_verbs::QpState::Error);
    let wc = one(&p.cq_b);
    assert_eq!(wc.wr_id(), 9);
    assert_eq!(wc.status().class(), WcClass::Flushed);
}
