//! Raw work requests: scatter/gather entries, send and receive requests.
//!
//! These are `ibv_send_wr`/`ibv_recv_wr` with typed constructors. They hold
//! raw addresses, so posting them is `unsafe`; `ferrovia-channel` builds
//! the borrow-checked layer on top.

use std::marker::PhantomData;
use std::ptr::null_mut;

use ferrovia_sys as sys;
use ferrovia_types::Sge;

use crate::types_abi::as_ibv_sges;

/// A send-queue work request (`struct ibv_send_wr`) whose SGE list lives
/// in `'a` (the device copies the list at post time and only reads it).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct SendWr<'a> {
    raw: sys::ibv_send_wr,
    _sges: PhantomData<&'a [Sge]>,
}

impl<'a> SendWr<'a> {
    fn new(wr_id: u64, opcode: sys::ibv_wr_opcode, sges: &'a [Sge]) -> SendWr<'a> {
        let mut raw = sys::ibv_send_wr {
            wr_id,
            opcode,
            send_flags: sys::ibv_send_flags::IBV_SEND_SIGNALED.0,
            ..Default::default()
        };
        // The C field is `*mut` but the device only reads the list.
        raw.sg_list = as_ibv_sges(sges);
        // A QP accepts at most a few dozen SGEs; the post fails with EINVAL
        // past its limit, so saturating here cannot hide anything.
        raw.num_sge = i32::try_from(sges.len()).unwrap_or(i32::MAX);
        SendWr {
            raw,
            _sges: PhantomData,
        }
    }

    /// A send of the bytes the SGEs gather.
    pub fn send(wr_id: u64, sges: &'a [Sge]) -> SendWr<'a> {
        Self::new(wr_id, sys::IBV_WR_SEND, sges)
    }

    /// A send carrying a 32-bit immediate value.
    pub fn send_with_imm(wr_id: u64, sges: &'a [Sge], imm: u32) -> SendWr<'a> {
        let mut wr = Self::new(wr_id, sys::IBV_WR_SEND_WITH_IMM, sges);
        wr.raw.__bindgen_anon_1.imm_data = imm.to_be();
        wr
    }

    /// An RDMA write to `remote_addr` in the peer region with `rkey`.
    pub fn write(wr_id: u64, sges: &'a [Sge], remote_addr: u64, rkey: u32) -> SendWr<'a> {
        let mut wr = Self::new(wr_id, sys::IBV_WR_RDMA_WRITE, sges);
        wr.set_remote(remote_addr, rkey);
        wr
    }

    /// An RDMA write that also consumes a receive at the peer and hands it
    /// `imm`.
    pub fn write_with_imm(
        wr_id: u64,
        sges: &'a [Sge],
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    ) -> SendWr<'a> {
        let mut wr = Self::new(wr_id, sys::IBV_WR_RDMA_WRITE_WITH_IMM, sges);
        wr.set_remote(remote_addr, rkey);
        wr.raw.__bindgen_anon_1.imm_data = imm.to_be();
        wr
    }

    /// An RDMA read from `remote_addr` into the local SGEs.
    pub fn read(wr_id: u64, sges: &'a [Sge], remote_addr: u64, rkey: u32) -> SendWr<'a> {
        let mut wr = Self::new(wr_id, sys::IBV_WR_RDMA_READ, sges);
        wr.set_remote(remote_addr, rkey);
        wr
    }

    /// A remote fetch-and-add: adds `add` to the 8-byte aligned u64 at
    /// `remote_addr` and writes its original value into the one 8-byte
    /// local SGE.
    pub fn fetch_add(
        wr_id: u64,
        sges: &'a [Sge],
        remote_addr: u64,
        rkey: u32,
        add: u64,
    ) -> SendWr<'a> {
        let mut wr = Self::new(wr_id, sys::IBV_WR_ATOMIC_FETCH_AND_ADD, sges);
        wr.set_atomic(remote_addr, rkey, add, 0);
        wr
    }

    /// A remote compare-and-swap: stores `swap` into the 8-byte aligned
    /// u64 at `remote_addr` if it equals `compare`, and writes its original
    /// value into the one 8-byte local SGE.
    pub fn compare_swap(
        wr_id: u64,
        sges: &'a [Sge],
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> SendWr<'a> {
        let mut wr = Self::new(wr_id, sys::IBV_WR_ATOMIC_CMP_AND_SWP, sges);
        wr.set_atomic(remote_addr, rkey, compare, swap);
        wr
    }

    /// Binds `window` over `len` bytes at RDMA address `addr` of `mr`
    /// (in `mr`'s address space: its iova for a zero-based region) with
    /// `rights` (remote read, write, atomics) and the new key `rkey`
    /// (`window.next_rkey()`). The peer of the queue pair this is posted
    /// on, and no other, reaches the window once the bind completed. The
    /// device checks the range against `mr` and the rights against `mr`'s
    /// (a remote-write window needs `LOCAL_WRITE` and `MW_BIND` on `mr`).
    pub fn bind_window(
        wr_id: u64,
        window: &'a crate::MemoryWindow,
        rkey: u32,
        mr: &'a crate::MemoryRegion,
        addr: u64,
        len: u64,
        rights: ferrovia_types::AccessFlags,
    ) -> SendWr<'a> {
        let mut wr = Self::new(wr_id, sys::IBV_WR_BIND_MW, &[]);
        wr.raw.__bindgen_anon_2.bind_mw = sys::ibv_send_wr__bindgen_ty_4__bindgen_ty_1 {
            mw: window.as_raw(),
            rkey,
            bind_info: sys::ibv_mw_bind_info {
                mr: mr.as_raw(),
                addr,
                length: len,
                mw_access_flags: rights.bits(),
            },
        };
        wr
    }

    /// A datagram: a send on a UD queue pair to the queue pair `remote_qpn`
    /// behind `ah`, which takes it only with Q_Key `remote_qkey`.
    pub fn datagram(
        wr_id: u64,
        sges: &'a [Sge],
        ah: &'a crate::AddressHandle,
        remote_qpn: u32,
        remote_qkey: u32,
    ) -> SendWr<'a> {
        let mut wr = Self::new(wr_id, sys::IBV_WR_SEND, sges);
        wr.raw.wr.ud = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: ah.as_raw(),
            remote_qpn,
            remote_qkey,
        };
        wr
    }

    /// Invalidates the window (type 2) whose current key is `rkey`, bound
    /// on this queue pair: accesses with it fail from then on.
    pub fn local_invalidate(wr_id: u64, rkey: u32) -> SendWr<'a> {
        let mut wr = Self::new(wr_id, sys::IBV_WR_LOCAL_INV, &[]);
        wr.raw.__bindgen_anon_1.invalidate_rkey = rkey;
        wr
    }

    /// A send that also invalidates, at the peer, the window whose key is
    /// `rkey` (bound on the peer's queue pair of this connection), before
    /// the peer's receive completes.
    pub fn send_with_invalidate(wr_id: u64, sges: &'a [Sge], rkey: u32) -> SendWr<'a> {
        let mut wr = Self::new(wr_id, sys::IBV_WR_SEND_WITH_INV, sges);
        wr.raw.__bindgen_anon_1.invalidate_rkey = rkey;
        wr
    }

    fn set_atomic(&mut self, remote_addr: u64, rkey: u32, compare_add: u64, swap: u64) {
        // Writing a Copy union field is safe; it selects the `atomic` member.
        self.raw.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
            remote_addr,
            compare_add,
            swap,
            rkey,
        };
    }

    fn set_remote(&mut self, remote_addr: u64, rkey: u32) {
        // Writing a Copy union field is safe; it selects the `rdma` member.
        self.raw.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
    }

    /// Whether the request produces a completion (default: yes). An
    /// unsignalled request is complete once a later signalled one on the
    /// same send queue completes.
    pub fn signaled(mut self, yes: bool) -> Self {
        self.set_flag(sys::ibv_send_flags::IBV_SEND_SIGNALED.0, yes);
        self
    }

    /// Whether the payload is copied into the WQE at post time (inline);
    /// the gather buffers then need no lkey and are free on return.
    pub fn inline(mut self, yes: bool) -> Self {
        self.set_flag(sys::ibv_send_flags::IBV_SEND_INLINE.0, yes);
        self
    }

    fn set_flag(&mut self, flag: u32, on: bool) {
        if on {
            self.raw.send_flags |= flag;
        } else {
            self.raw.send_flags &= !flag;
        }
    }

    /// The request's `wr_id`.
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }

    /// Whether the request is signalled.
    pub fn is_signaled(&self) -> bool {
        self.raw.send_flags & sys::ibv_send_flags::IBV_SEND_SIGNALED.0 != 0
    }

    pub(crate) fn as_raw(&mut self) -> *mut sys::ibv_send_wr {
        &mut self.raw
    }
}

/// A receive-queue work request (`struct ibv_recv_wr`) whose SGE list lives
/// in `'a`.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct RecvWr<'a> {
    raw: sys::ibv_recv_wr,
    _sges: PhantomData<&'a [Sge]>,
}

impl<'a> RecvWr<'a> {
    /// A receive into the buffers the SGEs scatter to.
    pub fn new(wr_id: u64, sges: &'a [Sge]) -> RecvWr<'a> {
        RecvWr {
            raw: sys::ibv_recv_wr {
                wr_id,
                next: null_mut(),
                sg_list: as_ibv_sges(sges),
                num_sge: i32::try_from(sges.len()).unwrap_or(i32::MAX),
            },
            _sges: PhantomData,
        }
    }

    /// The request's `wr_id`.
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }

    pub(crate) fn as_raw(&mut self) -> *mut sys::ibv_recv_wr {
        &mut self.raw
    }
}

/// Links `wrs` into one list (each `next` points at the following one), so
/// posting `wrs[0]` posts them all with one doorbell.
pub fn link_send(wrs: &mut [SendWr<'_>]) {
    let len = wrs.len();
    let base = wrs.as_mut_ptr();
    for i in 0..len {
        let next = if i + 1 < len {
            // SAFETY: i + 1 < len, inside the slice.
            unsafe { base.add(i + 1) }.cast::<sys::ibv_send_wr>()
        } else {
            null_mut()
        };
        // SAFETY: i < len; SendWr is repr(transparent) over ibv_send_wr.
        unsafe { (*base.add(i)).raw.next = next };
    }
}

/// Links `wrs` into one list, as [`link_send`] does for sends.
pub fn link_recv(wrs: &mut [RecvWr<'_>]) {
    let len = wrs.len();
    let base = wrs.as_mut_ptr();
    for i in 0..len {
        let next = if i + 1 < len {
            // SAFETY: i + 1 < len, inside the slice.
            unsafe { base.add(i + 1) }.cast::<sys::ibv_recv_wr>()
        } else {
            null_mut()
        };
        // SAFETY: i < len; RecvWr is repr(transparent) over ibv_recv_wr.
        unsafe { (*base.add(i)).raw.next = next };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_wr_fields() {
        let sges = [Sge::new(0x1000, 64, 7)];
        let mut wr = SendWr::write_with_imm(42, &sges, 0xdead_0000, 99, 0x0102_0304);
        assert_eq!(wr.wr_id(), 42);
        assert!(wr.is_signaled());
        let raw = wr.as_raw();
        // SAFETY: reading back what the constructor wrote.
        unsafe {
            assert_eq!((*raw).opcode, sys::IBV_WR_RDMA_WRITE_WITH_IMM);
            assert_eq!((*raw).wr.rdma.remote_addr, 0xdead_0000);
            assert_eq!((*raw).wr.rdma.rkey, 99);
            assert_eq!((*raw).__bindgen_anon_1.imm_data, 0x0102_0304u32.to_be());
            assert_eq!((*raw).num_sge, 1);
        }
        let wr = SendWr::send(1, &sges).signaled(false).inline(true);
        assert!(!wr.is_signaled());
    }

    #[test]
    fn linking_chains_in_order() {
        let a = [Sge::new(0, 1, 0)];
        let b = [Sge::new(0, 1, 0)];
        let mut wrs = [SendWr::send(1, &a), SendWr::send(2, &b)];
        link_send(&mut wrs);
        let first = wrs[0].as_raw();
        // SAFETY: the list was just linked inside `wrs`.
        unsafe {
            let second = (*first).next;
            assert_eq!((*second).wr_id, 2);
            assert!((*second).next.is_null());
        }
    }
}
