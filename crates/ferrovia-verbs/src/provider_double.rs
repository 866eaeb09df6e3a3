//! A provider double (feature `provider-double`): a fake context, queue
//! pair and completion queue whose function pointers do what a provider
//! minimally does (copy each request's descriptor into a ring, hand back
//! one completion per request), so benches measure what ferrovia's own
//! post and poll paths cost, classic and extended, without a device or
//! libibverbs. The same `send_path` / `poll_path` functions as
//! [`QueuePair`](crate::QueuePair) and
//! [`CompletionQueue`](crate::CompletionQueue) run; only the provider
//! below them is fake.
//!
//! The double leaves the extended builders it does not implement (atomics,
//! windows, datagram addresses) unset, as a provider that does not offer
//! them would: posting one fails with `EOPNOTSUPP` instead of calling
//! through NULL.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use ferrovia_sys as sys;

use crate::completion::WorkCompletion;
use crate::cq::poll_path;
use crate::cq_ex::PollPath;
use crate::error::Result;
use crate::qp::send_path;
use crate::qp_ex::PostPath;
use crate::wr::SendWr;

/// Requests the fake send queue remembers (a ring).
const RING: usize = 256;

/// What the fake provider keeps of a request, as a WQE would.
#[derive(Clone, Copy, Default)]
struct Wqe {
    wr_id: u64,
    opcode: u32,
    flags: u32,
    remote: u64,
    rkey: u32,
    sges: [(u64, u32, u32); 4],
    num_sge: usize,
}

struct State {
    ring: [Wqe; RING],
    head: usize,
    /// The request being built on the extended path.
    cur: Wqe,
    /// Completions the CQ holds (one per posted request).
    pending: u64,
    posted: u64,
    seq: u64,
    /// Batches opened on the extended path (`wr_start`).
    batches: u64,
}

impl Default for State {
    fn default() -> Self {
        State {
            ring: [Wqe::default(); RING],
            head: 0,
            cur: Wqe::default(),
            pending: 0,
            posted: 0,
            seq: 0,
            batches: 0,
        }
    }
}

/// A fake provider with one queue pair and one completion queue.
pub struct ProviderDouble {
    ctx: Box<UnsafeCell<sys::ibv_context>>,
    qp: Box<UnsafeCell<sys::ibv_qp_ex>>,
    cq: Box<UnsafeCell<sys::ibv_cq_ex>>,
    state: Box<UnsafeCell<State>>,
}

impl Default for ProviderDouble {
    fn default() -> Self {
        Self::new()
    }
}

/// The double's state, reached from a fake object's context pointer.
///
/// # Safety
/// `p` is the `qp_context` / `cq_context` a [`ProviderDouble`] set, and
/// no other reference to its state is live (the double is `!Sync` and
/// its stubs run one at a time, inside its own calls).
unsafe fn state<'a>(p: *mut libc::c_void) -> &'a mut State {
    // SAFETY: our caller's contract.
    unsafe { &mut *p.cast::<State>() }
}

fn push(st: &mut State, w: Wqe) {
    st.ring[st.head % RING] = w;
    st.head += 1;
    st.posted += 1;
    st.pending += 1;
}

unsafe extern "C" fn post_send(
    qp: *mut sys::ibv_qp,
    mut wr: *mut sys::ibv_send_wr,
    _bad: *mut *mut sys::ibv_send_wr,
) -> i32 {
    // SAFETY: called by `ibv_post_send` on the double's QP, whose
    // qp_context is its state; `wr` is a valid list of the caller's.
    unsafe {
        let st = state((*qp).qp_context);
        while !wr.is_null() {
            let w = &*wr;
            let mut q = Wqe {
                wr_id: w.wr_id,
                opcode: w.opcode,
                flags: w.send_flags,
                remote: w.wr.rdma.remote_addr,
                rkey: w.wr.rdma.rkey,
                num_sge: (w.num_sge as usize).min(4),
                ..Wqe::default()
            };
            for i in 0..q.num_sge {
                let s = &*w.sg_list.add(i);
                q.sges[i] = (s.addr, s.length, s.lkey);
            }
            push(st, q);
            wr = w.next;
        }
    }
    0
}

/// Starts building a request on the extended path.
///
/// # Safety
/// `q` is the double's extended QP.
unsafe fn begin(q: *mut sys::ibv_qp_ex, opcode: u32, rkey: u32, remote: u64) {
    // SAFETY: our caller's contract.
    unsafe {
        let st = state((*q).qp_base.qp_context);
        st.cur = Wqe {
            wr_id: (*q).wr_id,
            opcode,
            flags: (*q).wr_flags,
            remote,
            rkey,
            ..Wqe::default()
        };
    }
}

unsafe extern "C" fn wr_start(q: *mut sys::ibv_qp_ex) {
    // SAFETY: called on the double's QP.
    unsafe { state((*q).qp_base.qp_context).batches += 1 }
}
unsafe extern "C" fn wr_complete(_q: *mut sys::ibv_qp_ex) -> i32 {
    0
}
unsafe extern "C" fn wr_abort(_q: *mut sys::ibv_qp_ex) {}
unsafe extern "C" fn wr_send(q: *mut sys::ibv_qp_ex) {
    // SAFETY: called on the double's QP.
    unsafe { begin(q, sys::IBV_WR_SEND, 0, 0) }
}
unsafe extern "C" fn wr_rdma_write(q: *mut sys::ibv_qp_ex, rkey: u32, remote: u64) {
    // SAFETY: called on the double's QP.
    unsafe { begin(q, sys::IBV_WR_RDMA_WRITE, rkey, remote) }
}
unsafe extern "C" fn wr_rdma_read(q: *mut sys::ibv_qp_ex, rkey: u32, remote: u64) {
    // SAFETY: called on the double's QP.
    unsafe { begin(q, sys::IBV_WR_RDMA_READ, rkey, remote) }
}
unsafe extern "C" fn wr_set_sge(q: *mut sys::ibv_qp_ex, lkey: u32, addr: u64, len: u32) {
    // SAFETY: called on the double's QP.
    unsafe {
        let st = state((*q).qp_base.qp_context);
        let mut w = st.cur;
        w.num_sge = 1;
        w.sges[0] = (addr, len, lkey);
        push(st, w);
    }
}
unsafe extern "C" fn wr_set_inline_data(
    q: *mut sys::ibv_qp_ex,
    _addr: *mut libc::c_void,
    len: usize,
) {
    // SAFETY: called on the double's QP; the double keeps the length only
    // (it copies no bytes).
    unsafe {
        let st = state((*q).qp_base.qp_context);
        let mut w = st.cur;
        w.num_sge = 1;
        w.sges[0] = (0, len as u32, 0);
        push(st, w);
    }
}

unsafe extern "C" fn poll_cq(cq: *mut sys::ibv_cq, n: i32, wc: *mut sys::ibv_wc) -> i32 {
    // SAFETY: called by `ibv_poll_cq` on the double's CQ, whose cq_context
    // is its state; `wc` has room for `n`.
    unsafe {
        let st = state((*cq).cq_context);
        let k = st.pending.min(n.max(0) as u64) as usize;
        for i in 0..k {
            st.seq += 1;
            wc.add(i).write(sys::ibv_wc {
                wr_id: st.seq,
                opcode: sys::ibv_wc_opcode::IBV_WC_RDMA_WRITE,
                byte_len: 64,
                qp_num: 7,
                ..Default::default()
            });
        }
        st.pending -= k as u64;
        k as i32
    }
}

/// Makes the next completion current.
///
/// # Safety
/// `c` is the double's CQ.
unsafe fn advance(c: *mut sys::ibv_cq_ex) -> i32 {
    // SAFETY: our caller's contract.
    unsafe {
        let st = state((*c).cq_context);
        if st.pending == 0 {
            return libc::ENOENT;
        }
        st.pending -= 1;
        st.seq += 1;
        (*c).wr_id = st.seq;
        (*c).status = sys::ibv_wc_status::IBV_WC_SUCCESS;
        0
    }
}

unsafe extern "C" fn start_poll(c: *mut sys::ibv_cq_ex, _a: *mut sys::ibv_poll_cq_attr) -> i32 {
    // SAFETY: called on the double's CQ.
    unsafe { advance(c) }
}
unsafe extern "C" fn next_poll(c: *mut sys::ibv_cq_ex) -> i32 {
    // SAFETY: called on the double's CQ.
    unsafe { advance(c) }
}
unsafe extern "C" fn end_poll(_c: *mut sys::ibv_cq_ex) {}
unsafe extern "C" fn read_opcode(_c: *mut sys::ibv_cq_ex) -> sys::ibv_wc_opcode {
    sys::ibv_wc_opcode::IBV_WC_RDMA_WRITE
}
unsafe extern "C" fn read_u32_zero(_c: *mut sys::ibv_cq_ex) -> u32 {
    0
}
unsafe extern "C" fn read_byte_len(_c: *mut sys::ibv_cq_ex) -> u32 {
    64
}
unsafe extern "C" fn read_qp_num(_c: *mut sys::ibv_cq_ex) -> u32 {
    7
}
unsafe extern "C" fn read_wc_flags(_c: *mut sys::ibv_cq_ex) -> u32 {
    0
}

impl ProviderDouble {
    /// A fresh double: an empty send queue and completion queue.
    pub fn new() -> ProviderDouble {
        let state = Box::new(UnsafeCell::new(State::default()));
        let st = state.get().cast::<libc::c_void>();
        let ctx = Box::new(UnsafeCell::new(sys::ibv_context::default()));
        // SAFETY: fresh boxes, not shared yet.
        unsafe {
            let c = &mut *ctx.get();
            c.ops.post_send = Some(post_send);
            c.ops.poll_cq = Some(poll_cq);
        }
        let mut qp = sys::ibv_qp_ex::default();
        qp.qp_base.context = ctx.get();
        qp.qp_base.qp_context = st;
        qp.wr_start = Some(wr_start);
        qp.wr_complete = Some(wr_complete);
        qp.wr_abort = Some(wr_abort);
        qp.wr_send = Some(wr_send);
        qp.wr_rdma_write = Some(wr_rdma_write);
        qp.wr_rdma_read = Some(wr_rdma_read);
        qp.wr_set_sge = Some(wr_set_sge);
        qp.wr_set_inline_data = Some(wr_set_inline_data);
        let mut cq = sys::ibv_cq_ex {
            context: ctx.get(),
            cq_context: st,
            start_poll: Some(start_poll),
            next_poll: Some(next_poll),
            end_poll: Some(end_poll),
            read_opcode: Some(read_opcode),
            read_vendor_err: Some(read_u32_zero),
            read_byte_len: Some(read_byte_len),
            read_imm_data: Some(read_u32_zero),
            read_qp_num: Some(read_qp_num),
            read_src_qp: Some(read_u32_zero),
            read_wc_flags: Some(read_wc_flags),
            ..Default::default()
        };
        cq.cqe = RING as i32;
        ProviderDouble {
            ctx,
            qp: Box::new(UnsafeCell::new(qp)),
            cq: Box::new(UnsafeCell::new(cq)),
            state,
        }
    }

    /// Posts `wr` (a list) through `path` ([`PostPath::Auto`] means
    /// extended, as on a provider that offers it). The double copies the
    /// requests' descriptors, never the memory they name.
    pub fn post_send(&self, path: PostPath, wr: &mut SendWr<'_>) -> Result<()> {
        let qpx = NonNull::new(self.qp.get()).expect("boxed");
        let ex = (path != PostPath::Classic).then_some(qpx);
        // SAFETY: the double's QP (its `ibv_qp` is the start of its
        // `ibv_qp_ex`) and extended view; its provider reads no memory the
        // SGEs name, so no promise about that memory is needed.
        unsafe { send_path(qpx.cast(), ex, false, wr) }
    }

    /// Polls up to `out.len()` completions through `path`
    /// ([`PollPath::Auto`] means extended).
    pub fn poll<'a>(
        &self,
        path: PollPath,
        out: &'a mut [MaybeUninit<WorkCompletion>],
    ) -> Result<&'a [WorkCompletion]> {
        let cq = NonNull::new(self.cq.get()).expect("boxed");
        let ex = (path != PollPath::Classic).then_some(cq);
        // SAFETY: the double's CQ, its extended view with every reader
        // set, and room for `out.len()` entries.
        let got = unsafe { poll_path(cq.cast(), ex, out.as_mut_ptr().cast(), out.len()) }?;
        // SAFETY: the first `got` entries were written above.
        Ok(unsafe { std::slice::from_raw_parts(out.as_ptr().cast::<WorkCompletion>(), got) })
    }

    /// Requests posted so far.
    pub fn posted(&self) -> u64 {
        // SAFETY: no stub runs while `&self` is borrowed here.
        unsafe { (*self.state.get()).posted }
    }

    /// Batches opened through `ibv_wr_start` so far.
    pub fn extended_batches(&self) -> u64 {
        // SAFETY: as in `posted`.
        unsafe { (*self.state.get()).batches }
    }

    /// The last request's remote address and SGE lengths, as the fake
    /// provider recorded them.
    pub fn last(&self) -> Option<(u64, u64, Vec<u32>)> {
        // SAFETY: as in `posted`.
        let st = unsafe { &*self.state.get() };
        let w = st.ring[st.head.checked_sub(1)? % RING];
        let _ = (&self.ctx, w.opcode, w.flags, w.rkey);
        Some((
            w.wr_id,
            w.remote,
            w.sges[..w.num_sge].iter().map(|s| s.1).collect(),
        ))
    }
}

impl std::fmt::Debug for ProviderDouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderDouble")
            .field("posted", &self.posted())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrovia_types::Sge;

    #[test]
    fn both_post_paths_hand_the_provider_the_same_request() {
        let d = ProviderDouble::new();
        let one = [Sge::new(0x1000, 64, 5)];
        let two = [Sge::new(0x1000, 64, 5), Sge::new(0x2000, 8, 5)];
        let cases = [
            (PostPath::Classic, &one[..], 0),
            (PostPath::Extended, &one[..], 1),
            // Several elements go through ibv_post_send (rxe < 64's
            // wr_set_sge_list miscounts them).
            (PostPath::Extended, &two[..], 1),
            (PostPath::Classic, &two[..], 1),
        ];
        for (i, (path, sges, batches)) in cases.into_iter().enumerate() {
            let mut wr = SendWr::write(40 + i as u64, sges, 0xbeef, 9);
            d.post_send(path, &mut wr).unwrap();
            let lens: Vec<u32> = sges.iter().map(|s| s.length()).collect();
            assert_eq!(d.last(), Some((40 + i as u64, 0xbeef, lens)), "{path:?}");
            assert_eq!(d.extended_batches(), batches, "case {i}");
        }
        let mut wcs = [MaybeUninit::uninit(); 8];
        assert_eq!(d.poll(PollPath::Classic, &mut wcs[..1]).unwrap().len(), 1);
        let got = d.poll(PollPath::Extended, &mut wcs).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].byte_len(), 64);
        assert!(d.poll(PollPath::Extended, &mut wcs).unwrap().is_empty());
    }

    /// rust-ibverbs #151: a provider whose extended QP lacks a builder.
    #[test]
    fn an_op_the_provider_did_not_set_is_refused_not_called() {
        let d = ProviderDouble::new();
        let sges = [Sge::new(0x1000, 8, 5)];
        let mut wr = SendWr::fetch_add(1, &sges, 0x40, 9, 1);
        let err = d.post_send(PostPath::Extended, &mut wr).unwrap_err();
        assert!(
            matches!(
                err,
                crate::VerbsError::Post {
                    errno: libc::EOPNOTSUPP,
                    bad_wr_id: 1,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(d.posted(), 0, "nothing of the batch was posted");
    }
}
