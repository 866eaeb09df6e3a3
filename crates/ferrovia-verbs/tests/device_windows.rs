//! Device tests of type 2 memory windows at the verbs layer (soft-RoCE
//! offers type 2B): fewer rights than the registration, revoked by a
//! local invalidate or by the peer's send with invalidate; a stale access
//! fails with IBV_WC_REM_ACCESS_ERR and touches nothing. Run by
//! `cargo xtask test`.
//!
//! A window's range is not tested here: soft-RoCE checks an access
//! through a window against the range of the window's registration, not
//! the window's (`check_rkey` in the kernel's rxe_resp.c), so a window
//! narrows rights there but not the range.

mod common;

use common::{Buf, Pair, ok, one, pattern};
use ferrovia_verbs::{AccessFlags, MemoryWindow, PollPath, PostPath, RecvWr, SendWr, WcStatus};

/// `b`'s registration, windows may be bound over it.
fn target(p: &Pair) -> Buf {
    let mut t = Buf::new(
        &p.pd,
        4096,
        AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::MW_BIND,
    );
    t.data.copy_from_slice(&pattern(4096, 11));
    t
}

/// Binds `w` over `len` bytes at `offset` of `t` on `p.b` (the QP `a`
/// reaches); returns the window's new rkey.
fn bind(
    p: &Pair,
    w: &mut MemoryWindow,
    t: &Buf,
    offset: u64,
    len: u64,
    rights: AccessFlags,
) -> u32 {
    let rkey = w.next_rkey();
    // SAFETY: a bind names no SGE memory; the window and region live.
    unsafe {
        p.b.post_send(&mut SendWr::bind_window(
            7,
            w,
            rkey,
            &t.mr,
            t.addr() + offset,
            len,
            rights,
        ))
        .unwrap()
    };
    ok(&p.cq_b, 7);
    w.record_rkey(rkey);
    rkey
}

/// `a` writes 64 bytes through `rkey` at `offset` of `t`; the status.
fn write(p: &Pair, t: &Buf, rkey: u32, offset: u64) -> WcStatus {
    let src = Buf::new(&p.pd, 64, AccessFlags::NONE);
    let ss = [src.sge(0, 64)];
    // SAFETY: registered source, untouched until the completion.
    unsafe {
        p.a.post_send(&mut SendWr::write(9, &ss, t.addr() + offset, rkey))
            .unwrap()
    };
    one(&p.cq_a).status()
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_window_grants_its_rights_and_no_more() {
    for (post, poll) in [
        (PostPath::Extended, PollPath::Extended),
        (PostPath::Classic, PollPath::Classic),
    ] {
        // Read-only window over the second KiB.
        let p = Pair::with_paths(post, poll);
        let t = target(&p);
        let mut w = MemoryWindow::alloc_type2(&p.pd).unwrap();
        let rkey = bind(&p, &mut w, &t, 1024, 1024, AccessFlags::REMOTE_READ);
        assert_ne!(rkey, t.mr.rkey());
        let mut back = Buf::new(&p.pd, 1024, AccessFlags::LOCAL_WRITE);
        let bs = [back.sge(0, 1024)];
        // SAFETY: registered, untouched until the completion.
        unsafe {
            p.a.post_send(&mut SendWr::read(1, &bs, t.addr() + 1024, rkey))
                .unwrap()
        };
        ok(&p.cq_a, 1);
        assert_eq!(back.data, t.data[1024..2048], "{post:?}");
        back.data.fill(0);
        // A write through a read-only window is refused by the target.
        assert_eq!(write(&p, &t, rkey, 1024), WcStatus::REM_ACCESS_ERR);
        assert_eq!(t.data, pattern(4096, 11), "nothing was written");
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_local_invalidate_revokes_the_window_and_a_stale_write_touches_nothing() {
    let p = Pair::new();
    let t = target(&p);
    let mut w = MemoryWindow::alloc_type2(&p.pd).unwrap();
    let rkey = bind(&p, &mut w, &t, 0, 4096, AccessFlags::REMOTE_WRITE);
    assert_eq!(write(&p, &t, rkey, 0), WcStatus::SUCCESS);
    let before = t.data.clone();
    // SAFETY: an invalidate names no memory.
    unsafe {
        p.b.post_send(&mut SendWr::local_invalidate(8, rkey))
            .unwrap()
    };
    ok(&p.cq_b, 8);
    assert_eq!(write(&p, &t, rkey, 128), WcStatus::REM_ACCESS_ERR);
    assert_eq!(t.data, before, "the stale write touched nothing");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn the_peer_revokes_with_a_send_with_invalidate() {
    let p = Pair::new();
    let t = target(&p);
    let mut w = MemoryWindow::alloc_type2(&p.pd).unwrap();
    let rkey = bind(&p, &mut w, &t, 0, 4096, AccessFlags::REMOTE_WRITE);
    let inbox = Buf::new(&p.pd, 64, AccessFlags::LOCAL_WRITE);
    let msg = Buf::new(&p.pd, 16, AccessFlags::NONE);
    let rs = [inbox.sge(0, 64)];
    let ss = [msg.sge(0, 16)];
    // SAFETY: registered buffers, untouched until the completions.
    unsafe {
        p.b.post_recv(&mut RecvWr::new(20, &rs)).unwrap();
        p.a.post_send(&mut SendWr::send_with_invalidate(21, &ss, rkey))
            .unwrap();
    }
    ok(&p.cq_a, 21);
    let wc = ok(&p.cq_b, 20);
    assert_eq!(wc.byte_len(), 16);
    // soft-RoCE flags the invalidation with the kernel's bit
    // (IB_WC_WITH_INVALIDATE, 1 << 2), which libibverbs reads as
    // IBV_WC_IP_CSUM_OK, so `invalidated_rkey()` cannot see it there; a
    // device that flags it right names the key.
    if let Some(k) = wc.invalidated_rkey() {
        assert_eq!(k, rkey);
    }
    let before = t.data.clone();
    assert_eq!(write(&p, &t, rkey, 0), WcStatus::REM_ACCESS_ERR);
    assert_eq!(t.data, before, "the stale write touched nothing");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_rebound_window_refuses_its_old_key() {
    let p = Pair::new();
    let t = target(&p);
    let mut w = MemoryWindow::alloc_type2(&p.pd).unwrap();
    let old = bind(&p, &mut w, &t, 0, 1024, AccessFlags::REMOTE_WRITE);
    // SAFETY: an invalidate names no memory.
    unsafe {
        p.b.post_send(&mut SendWr::local_invalidate(8, old))
            .unwrap()
    };
    ok(&p.cq_b, 8);
    let new = bind(&p, &mut w, &t, 2048, 1024, AccessFlags::REMOTE_WRITE);
    assert_ne!(new, old);
    assert_eq!(write(&p, &t, new, 2048), WcStatus::SUCCESS);
    let before = t.data.clone();
    assert_eq!(write(&p, &t, old, 0), WcStatus::REM_ACCESS_ERR);
    assert_eq!(t.data, before);
}
