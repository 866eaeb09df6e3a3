//! Direct access to a same-host peer's registered memory: where UCX
//! attached the peer's segment in this process (`ucp_rkey_ptr`, shared
//! memory), a put or get is a copy and an atomic a CPU atomic on the
//! mapped word, done inside the post and complete when the call returns.
//! UCX's own shared-memory transports do the same copies and atomics
//! (`uct_mm`), so direct accesses and UCX's mix on one word.
//!
//! Why it keeps the transport's semantics (the rules are `crate::peer`'s):
//! - *remote completion*: the bytes are in the peer's memory when the op
//!   completes, as after an RC ACK; a release fence orders them before
//!   whatever the program does next (a send that tells the peer, a flag);
//! - *ordering*: the engine takes this path only for an op with nothing
//!   of its peer's before it still outstanding (no unflushed write, no
//!   pending send), so it cannot overtake an earlier op; a write with
//!   immediate takes the engine's path (its notification is a message);
//! - *revocation*: a mapping lives in the key's table entry beside its
//!   rkey and leaves with it when the owner revokes the key, before the
//!   acknowledgement is sent; every direct access runs under the engine's
//!   lock and ends inside its call, so none is in flight then, and none
//!   lands after the acknowledgement;
//! - *lifetime*: the segment stays attached until `ucp_rkey_destroy`,
//!   which comes after the entry is gone.
//!
//! The peer writes the same memory concurrently: it is touched through raw
//! pointers and atomics only, never through a reference.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering, fence};

use ferrovia_channel::transport::{OpKind, SendOp};

use crate::keys::KeyInfo;
use crate::ucp::Rkey;

/// Whether keys are mapped where UCX can (`FERROVIA_UCX_MAPPED=off` turns
/// the direct path off, to compare it with UCX's own).
pub(crate) fn enabled() -> bool {
    !matches!(
        std::env::var("FERROVIA_UCX_MAPPED").as_deref(),
        Ok("off" | "0" | "no" | "false")
    )
}

/// Where a peer's registration is mapped in this process: the local
/// address of its first byte (the owner's `KeyInfo::addr`).
#[derive(Clone, Copy)]
pub(crate) struct Mapping {
    base: NonNull<u8>,
    len: u64,
}

// SAFETY: an address in a segment the engine's rkey keeps attached; it is
// only dereferenced by the engine, under its lock (see the module doc).
unsafe impl Send for Mapping {}

impl Mapping {
    /// The mapping of the registration `info` describes, unpacked as
    /// `rkey`, if UCX attached all of it in this process.
    ///
    /// # Safety
    /// `rkey` is live.
    pub(crate) unsafe fn of(rkey: Rkey, info: &KeyInfo) -> Option<Mapping> {
        // SAFETY: a live key (the caller's contract).
        let base = unsafe { rkey.mapped(info.addr, info.len) }?;
        Some(Mapping {
            base,
            len: info.len,
        })
    }

    /// Performs `op` on the peer's bytes at `addr` (the owner's address,
    /// checked against the registration's range and rights), if this path
    /// can: `false` leaves it to the engine (a write with immediate, an
    /// unaligned atomic word, an atomic without its 8-byte result buffer).
    ///
    /// # Safety
    /// The mapping's rkey is live and the peer's key is not revoked (the
    /// engine holds both in the key's entry, under its lock); `op`'s local
    /// buffers are valid for the op (the contract of `Transport::post_send`).
    #[inline]
    pub(crate) unsafe fn access(self, op: &SendOp, addr: u64, info: &KeyInfo) -> bool {
        let Some(off) = addr.checked_sub(info.addr).filter(|&o| o < self.len) else {
            return false;
        };
        // SAFETY: `off` is inside the attached registration.
        let at = unsafe { self.base.as_ptr().add(off as usize) };
        match op.kind {
            OpKind::Write if op.imm.is_none() => {
                let mut dst = at;
                for s in op.sges() {
                    let len = s.length() as usize;
                    // SAFETY: the source is the op's local buffer (the
                    // caller's contract); the destination lies in the
                    // peer's registration (the range was checked: the
                    // sum of the lengths fits from `addr`). `copy`, as a
                    // loopback op's buffers may overlap.
                    unsafe {
                        std::ptr::copy(s.addr() as usize as *const u8, dst, len);
                        dst = dst.add(len);
                    }
                }
                fence(Ordering::Release);
            }
            OpKind::Read => {
                fence(Ordering::Acquire);
                let mut src = at.cast_const();
                for s in op.sges() {
                    let len = s.length() as usize;
                    // SAFETY: as for a write, the other way round.
                    unsafe {
                        std::ptr::copy(src, s.addr() as usize as *mut u8, len);
                        src = src.add(len);
                    }
                }
            }
            OpKind::FetchAdd | OpKind::CompareSwap => {
                let Some(result) = op.sges().first().filter(|s| s.length() == 8) else {
                    return false;
                };
                if !(at as usize).is_multiple_of(8) {
                    return false;
                }
                // SAFETY: an aligned word inside the peer's registration,
                // which every process accesses atomically (UCX's
                // shared-memory and software atomics are CPU atomics).
                let word = unsafe { AtomicU64::from_ptr(at.cast::<u64>()) };
                let old = if op.kind == OpKind::FetchAdd {
                    word.fetch_add(op.compare_add, Ordering::SeqCst)
                } else {
                    match word.compare_exchange(
                        op.compare_add,
                        op.swap,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    ) {
                        Ok(v) | Err(v) => v,
                    }
                };
                // SAFETY: the op's 8-byte result buffer (checked above),
                // which the transport may write until the op completes; it
                // may be unaligned for a u64.
                unsafe { (result.addr() as usize as *mut u64).write_unaligned(old) };
            }
            _ => return false,
        }
        true
    }
}
