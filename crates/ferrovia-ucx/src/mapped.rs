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

use ferrovia_types::AccessFlags;

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

    /// The lane's view of this mapping for the registration `info`
    /// describes, known as `key`.
    pub(crate) fn lane_key(self, key: u32, info: &KeyInfo) -> LaneKey {
        LaneKey {
            key,
            iova: info.iova,
            len: self.len.min(info.len),
            access: info.access,
            base: self.base,
        }
    }
}

/// A mapped key as the direct lane uses it: everything an access needs to
/// find its bytes and check its range and rights, in one small value
/// (kept beside the key's table entry, and forgotten with it).
#[derive(Clone, Copy)]
pub(crate) struct LaneKey {
    pub(crate) key: u32,
    /// The RDMA address of the registration's first byte.
    iova: u64,
    len: u64,
    access: AccessFlags,
    /// Where that first byte is mapped in this process.
    base: NonNull<u8>,
}

// SAFETY: as for `Mapping`, whose address it holds.
unsafe impl Send for LaneKey {}

impl LaneKey {
    /// Where `len` bytes at RDMA address `raddr` are mapped here, if they
    /// lie inside the registration and `need` is granted.
    #[inline(always)]
    pub(crate) fn target(&self, raddr: u64, len: u64, need: AccessFlags) -> Option<*mut u8> {
        let off = raddr.wrapping_sub(self.iova);
        if off > self.len || len > self.len - off || !self.access.contains(need) {
            return None;
        }
        // SAFETY: `off` is inside the attached registration.
        Some(unsafe { self.base.as_ptr().add(off as usize) })
    }
}

/// Performs `op` on the peer's bytes at `at` (where `target` put them),
/// if this path can: `false` leaves it to the engine (a write with
/// immediate, a send, an unaligned atomic word, an atomic without its
/// 8-byte result buffer).
///
/// # Safety
/// `at` came from [`LaneKey::target`] for `op`'s range and right, of a key
/// that is live and not revoked (the engine holds it, under its lock); `op`'s
/// local buffers are valid for the op (the contract of
/// `Transport::post_send`).
#[inline(always)]
pub(crate) unsafe fn access(op: &SendOp, at: *mut u8) -> bool {
    match op.kind {
        OpKind::Write if op.imm.is_none() => {
            let mut dst = at;
            for s in op.sges() {
                let len = s.length() as usize;
                // SAFETY: the source is the op's local buffer (the
                // caller's contract); the destination lies in the peer's
                // registration (the range was checked: the sum of the
                // lengths fits from `at`). `copy`, as a loopback op's
                // buffers may overlap.
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
            if op.num_sge != 1 || op.sges[0].length() != 8 || !(at as usize).is_multiple_of(8) {
                return false;
            }
            let result = op.sges[0].addr() as usize as *mut u64;
            // SAFETY: an aligned word inside the peer's registration, which
            // every process accesses atomically (UCX's shared-memory and
            // software atomics are CPU atomics).
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
            // SAFETY: the op's 8-byte result buffer (checked above), which
            // the transport may write until the op completes; it may be
            // unaligned for a u64.
            unsafe { result.write_unaligned(old) };
        }
        _ => return false,
    }
    true
}
