//! The extended post path: a list of `ibv_send_wr`s posted through
//! `ibv_wr_start` / `ibv_wr_*` / `ibv_wr_complete` instead of
//! `ibv_post_send`.
//!
//! The function pointers of `struct ibv_qp_ex` are called directly (the
//! header's inlines do nothing else), each checked for NULL first: a
//! provider leaves the builders of operations it was not asked for (or
//! does not offer) unset, and calling one is the crash of rust-ibverbs
//! #151. A missing one aborts the whole batch with `EOPNOTSUPP`, so
//! nothing of it is posted.

use std::ptr::NonNull;

use ferrovia_sys as sys;

/// The most bytes of several inline parts gathered into one copy (more
/// than any provider's inline limit ferrovia asks for).
const INLINE_GATHER: usize = 1024;

/// Why a batch was not posted: the errno, and that nothing of it was.
pub(crate) type Refused = i32;

/// Posts the list starting at `wr` through the extended interface of
/// `qpx`, as one batch: either every request is posted or none is. `ud`:
/// the QP is a datagram QP, whose requests carry an address handle.
///
/// # Safety
/// `qpx` must be the extended view (`ibv_qp_to_qp_ex`) of a live QP that
/// was created by `ibv_create_qp_ex` with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`;
/// `wr` must start a valid, NULL-terminated list of `ibv_send_wr`s whose
/// SGE arrays (and, for binds, windows and regions) are live; the memory
/// the SGEs name must satisfy [`QueuePair::post_send`](crate::QueuePair::post_send)'s
/// contract. No other thread may be inside a batch of this QP unless the
/// provider locks (it does unless the QP was made with a thread domain,
/// which ferrovia never does).
pub(crate) unsafe fn post(
    qpx: NonNull<sys::ibv_qp_ex>,
    wr: *const sys::ibv_send_wr,
    ud: bool,
) -> Result<(), Refused> {
    let q = qpx.as_ptr();
    // SAFETY: `q` is a live extended QP (our caller's contract); reading
    // its function pointers reads fields the provider filled at creation.
    let (Some(start), Some(complete), Some(abort)) =
        (unsafe { ((*q).wr_start, (*q).wr_complete, (*q).wr_abort) })
    else {
        return Err(libc::EOPNOTSUPP);
    };
    // SAFETY: a live extended QP; the provider locks the batch.
    unsafe { start(q) };
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: `cur` is an element of our caller's valid list.
        let w = unsafe { &*cur };
        // SAFETY: as above: the QP is live and inside its batch, `w` is
        // valid, and its SGEs satisfy our caller's contract.
        if let Err(errno) = unsafe { one(q, w, ud) } {
            // SAFETY: inside the batch `start` opened.
            unsafe { abort(q) };
            return Err(errno);
        }
        cur = w.next;
    }
    // SAFETY: closes the batch `start` opened; on failure the provider
    // posted none of it.
    match unsafe { complete(q) } {
        0 => Ok(()),
        e => Err(e.abs()),
    }
}

/// Builds one request inside an open batch.
///
/// # Safety
/// As for [`post`], with the batch opened by `wr_start`.
unsafe fn one(q: *mut sys::ibv_qp_ex, w: &sys::ibv_send_wr, ud: bool) -> Result<(), Refused> {
    // SAFETY: `q` is live (our caller's contract); plain field writes the
    // builders read (`wr_id`, `wr_flags`).
    unsafe {
        (*q).wr_id = w.wr_id;
        // The builder copies the flags into the WQE. Inline data is set by
        // the data setter, but soft-RoCE's kernel also reads the INLINE
        // flag (without it the copied bytes fail as IBV_WC_LOC_QP_OP_ERR):
        // it stays exactly when the data goes inline.
        let inline = sys::ibv_send_flags::IBV_SEND_INLINE.0;
        (*q).wr_flags = if goes_inline(w) {
            w.send_flags
        } else {
            w.send_flags & !inline
        };
    }
    let missing = libc::EOPNOTSUPP;
    // SAFETY: the union members read are the ones the opcode selects (the
    // list's builder wrote them for that opcode); each builder is called
    // only when the provider set it.
    unsafe {
        let x = &*q;
        match w.opcode {
            sys::IBV_WR_RDMA_WRITE => {
                x.wr_rdma_write.ok_or(missing)?(q, w.wr.rdma.rkey, w.wr.rdma.remote_addr)
            }
            sys::IBV_WR_RDMA_WRITE_WITH_IMM => x.wr_rdma_write_imm.ok_or(missing)?(
                q,
                w.wr.rdma.rkey,
                w.wr.rdma.remote_addr,
                w.__bindgen_anon_1.imm_data,
            ),
            sys::IBV_WR_SEND => x.wr_send.ok_or(missing)?(q),
            sys::IBV_WR_SEND_WITH_IMM => {
                x.wr_send_imm.ok_or(missing)?(q, w.__bindgen_anon_1.imm_data)
            }
            sys::IBV_WR_SEND_WITH_INV => {
                x.wr_send_inv.ok_or(missing)?(q, w.__bindgen_anon_1.invalidate_rkey)
            }
            sys::IBV_WR_RDMA_READ => {
                x.wr_rdma_read.ok_or(missing)?(q, w.wr.rdma.rkey, w.wr.rdma.remote_addr)
            }
            sys::IBV_WR_ATOMIC_CMP_AND_SWP => x.wr_atomic_cmp_swp.ok_or(missing)?(
                q,
                w.wr.atomic.rkey,
                w.wr.atomic.remote_addr,
                w.wr.atomic.compare_add,
                w.wr.atomic.swap,
            ),
            sys::IBV_WR_ATOMIC_FETCH_AND_ADD => x.wr_atomic_fetch_add.ok_or(missing)?(
                q,
                w.wr.atomic.rkey,
                w.wr.atomic.remote_addr,
                w.wr.atomic.compare_add,
            ),
            sys::IBV_WR_LOCAL_INV => {
                // No data: the request only invalidates.
                x.wr_local_inv.ok_or(missing)?(q, w.__bindgen_anon_1.invalidate_rkey);
                return Ok(());
            }
            sys::IBV_WR_BIND_MW => {
                let b = &w.__bindgen_anon_2.bind_mw;
                x.wr_bind_mw.ok_or(missing)?(q, b.mw, b.rkey, &b.bind_info);
                return Ok(());
            }
            _ => return Err(libc::EINVAL),
        }
        if ud {
            let ud = &w.wr.ud;
            x.wr_set_ud_addr.ok_or(missing)?(q, ud.ah, ud.remote_qpn, ud.remote_qkey);
        }
        data(q, w)
    }
}

/// Attaches the request's data: copied now if inline, else its SGEs.
///
/// Data of one element goes through `wr_set_sge` (lists of several never
/// reach this path: see [`fits`]). Inline data goes through
/// `wr_set_inline_data` (one buffer), never
/// `wr_set_inline_data_list`: soft-RoCE's list setter before rdma-core 64
/// (commit 1e8ed0aff) never adds up the lengths, so it sends 0 bytes and
/// copies several parts past the WQE's inline area. Several parts are
/// gathered here first, up to [`INLINE_GATHER`] bytes; beyond that the
/// request goes by its SGEs instead (its memory stays lent until the
/// completion either way, so that is always sound).
///
/// # Safety
/// As for [`one`], after the request's builder.
unsafe fn data(q: *mut sys::ibv_qp_ex, w: &sys::ibv_send_wr) -> Result<(), Refused> {
    let n = usize::try_from(w.num_sge).map_err(|_| libc::EINVAL)?;
    let missing = libc::EOPNOTSUPP;
    // SAFETY: a live QP inside its batch.
    let x = unsafe { &*q };
    let sges: &[sys::ibv_sge] = if n == 0 {
        &[]
    } else {
        // SAFETY: `sg_list` has `num_sge` valid entries (our caller's list).
        unsafe { std::slice::from_raw_parts(w.sg_list, n) }
    };
    if goes_inline(w) {
        let set = x.wr_set_inline_data.ok_or(missing)?;
        if let [s] = sges {
            // SAFETY: the provider copies the bytes (valid by our caller's
            // contract) before returning.
            unsafe { set(q, s.addr as usize as *mut libc::c_void, s.length as usize) };
            return Ok(());
        }
        let mut buf = [0u8; INLINE_GATHER];
        let mut at = 0;
        for s in sges {
            let len = s.length as usize;
            // SAFETY: an inline part is `length` readable bytes at `addr`
            // (our caller's contract); `at + len <= total <= INLINE_GATHER`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    s.addr as usize as *const u8,
                    buf.as_mut_ptr().add(at),
                    len,
                );
            }
            at += len;
        }
        // SAFETY: `buf` holds the gathered bytes; the provider copies them.
        unsafe { set(q, buf.as_mut_ptr().cast(), at) };
        return Ok(());
    }
    match sges {
        [] => {}
        // SAFETY: the provider copies the element into the WQE; the memory
        // it names follows our caller's contract.
        [s] => unsafe { x.wr_set_sge.ok_or(missing)?(q, s.lkey, s.addr, s.length) },
        // `fits` sent lists with such a request to ibv_post_send.
        _ => return Err(libc::EINVAL),
    }
    Ok(())
}

/// Whether every request of the list starting at `wr` takes this path:
/// at most one element, or inline data. A request of several elements
/// would need `wr_set_sge_list`, which soft-RoCE before rdma-core 64
/// (406cd2ad0) gets wrong (it sums the first element's length `num_sge`
/// times, and the kernel then fails the request or reads past the
/// list); such a list goes through `ibv_post_send`, which may interleave
/// with this path outside a batch.
///
/// # Safety
/// `wr` starts a valid, NULL-terminated list.
pub(crate) unsafe fn fits(mut wr: *const sys::ibv_send_wr) -> bool {
    while !wr.is_null() {
        // SAFETY: an element of our caller's list.
        let w = unsafe { &*wr };
        if w.num_sge > 1 && !goes_inline(w) {
            return false;
        }
        wr = w.next;
    }
    true
}

/// Whether `w`'s data is copied inline on this path: asked for, and one
/// part or parts that fit [`INLINE_GATHER`].
fn goes_inline(w: &sys::ibv_send_wr) -> bool {
    if w.send_flags & sys::ibv_send_flags::IBV_SEND_INLINE.0 == 0 {
        return false;
    }
    let n = usize::try_from(w.num_sge).unwrap_or(0);
    if n <= 1 {
        return true;
    }
    // SAFETY: `sg_list` has `num_sge` valid entries (the caller's list,
    // as for `post`).
    let sges = unsafe { std::slice::from_raw_parts(w.sg_list, n) };
    sges.iter().map(|s| s.length as usize).sum::<usize>() <= INLINE_GATHER
}
