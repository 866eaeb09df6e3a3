//! One-sided operations on an endpoint: puts and gets of contiguous bytes
//! (`ucp_put_nbx`, `ucp_get_nbx`) and 64-bit atomics (`ucp_atomic_op_nbx`).

use super::datatype::WORD;
use super::endpoint::Ep;
use super::ffi;
use super::memory::Rkey;
use super::request::send_param;
use super::status::{Started, started};

/// A 64-bit atomic operation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Atomic {
    /// Fetch-and-add of the operand.
    Add,
    /// Compare-and-swap: compares with the operand, and swaps in the value
    /// the reply buffer holds when the operation is issued.
    CompareSwap,
}

impl Ep {
    /// `ucp_put_nbx` of `len` bytes at `local` to `remote` under `rkey`;
    /// the completion callback reports `token`.
    ///
    /// # Safety
    /// See [`Ep`]; `rkey` was unpacked on this endpoint and is not
    /// destroyed; the `len` bytes at `local` stay valid until the
    /// operation completes.
    #[inline]
    pub(crate) unsafe fn put(
        self,
        local: *mut u8,
        len: usize,
        remote: u64,
        rkey: Rkey,
        token: u64,
    ) -> Started {
        let param = send_param(token);
        // SAFETY: the caller's contract: live endpoint and rkey, a local
        // buffer valid until completion.
        started(unsafe {
            ffi::ucp_put_nbx(self.raw(), local.cast(), len, remote, rkey.raw(), &param)
        })
    }

    /// `ucp_get_nbx` of `len` bytes at `remote` under `rkey` into `local`;
    /// the completion callback reports `token`.
    ///
    /// # Safety
    /// As [`Ep::put`], and the `len` bytes at `local` are writable (and
    /// not otherwise used) until the operation completes.
    #[inline]
    pub(crate) unsafe fn get(
        self,
        local: *mut u8,
        len: usize,
        remote: u64,
        rkey: Rkey,
        token: u64,
    ) -> Started {
        let param = send_param(token);
        // SAFETY: the caller's contract: live endpoint and rkey, a local
        // buffer writable until completion.
        started(unsafe {
            ffi::ucp_get_nbx(self.raw(), local.cast(), len, remote, rkey.raw(), &param)
        })
    }

    /// `ucp_atomic_op_nbx` on the 8-byte word at `remote` under `rkey`:
    /// the operand is read at `operand`, the original value lands at
    /// `reply` (which holds the swap value of a compare-and-swap); the
    /// completion callback reports `token`.
    ///
    /// # Safety
    /// See [`Ep`]; `rkey` was unpacked on this endpoint and is not
    /// destroyed; the 8 bytes at `operand` stay readable, and those at
    /// `reply` writable, until the operation completes.
    #[inline]
    pub(crate) unsafe fn atomic(
        self,
        op: Atomic,
        operand: *const u64,
        remote: u64,
        rkey: Rkey,
        reply: *mut u64,
        token: u64,
    ) -> Started {
        let opcode = match op {
            Atomic::Add => ffi::UCP_ATOMIC_OP_ADD,
            Atomic::CompareSwap => ffi::UCP_ATOMIC_OP_CSWAP,
        };
        let mut param = send_param(token);
        param.op_attr_mask |= ffi::UCP_OP_ATTR_FIELD_DATATYPE | ffi::UCP_OP_ATTR_FIELD_REPLY_BUFFER;
        param.datatype = WORD;
        param.reply_buffer = reply.cast();
        // SAFETY: the caller's contract: live endpoint and rkey, operand
        // and reply buffers valid until completion.
        started(unsafe {
            ffi::ucp_atomic_op_nbx(
                self.raw(),
                opcode,
                operand.cast(),
                1,
                remote,
                rkey.raw(),
                &param,
            )
        })
    }
}
