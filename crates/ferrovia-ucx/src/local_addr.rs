//! The local buffers of posted operations, in this process's addresses.
//! Elements carry RDMA addresses, which a verbs device takes for local
//! buffers too; for a zero-based or rebased registration they count from
//! its own base, not the pointer UCX wants. Keys of such registrations are
//! minted with `REBASED` set, and an operation naming one has its
//! elements translated before UCX sees it; every other goes as it is (one
//! bit test per element).

use ferrovia_channel::transport::{RecvOp, SendOp};
use ferrovia_channel::{TransportError, TransportResult};
use ferrovia_types::Sge;

use crate::error::UcxError;
use crate::keys::{KeyDirectory, REBASED};

/// How many operations are translated on the stack.
const BATCH: usize = 16;

/// Whether any of `sges` needs translating.
#[inline]
pub(crate) fn rebased(sges: &[Sge]) -> bool {
    sges.iter().any(|s| s.lkey() & REBASED != 0)
}

impl KeyDirectory {
    /// Rewrites `sges` of rebased keys to this process's addresses (and
    /// plain keys, so they are not translated again).
    fn localize(&self, sges: &mut [Sge]) -> TransportResult<()> {
        for s in sges.iter_mut().filter(|s| s.lkey() & REBASED != 0) {
            let addr = self
                .local_addr(s.lkey(), s.addr(), u64::from(s.length()))
                .ok_or_else(|| {
                    TransportError::Backend(Box::new(UcxError::UnknownLocalBuffer {
                        key: s.lkey(),
                        addr: s.addr(),
                        len: s.length(),
                    }))
                })?;
            *s = Sge::new(addr, s.length(), s.lkey() & !REBASED);
        }
        Ok(())
    }
}

/// An operation with local elements.
pub(crate) trait Elements: Copy {
    fn used(&self) -> &[Sge];
    fn elements(&mut self) -> &mut [Sge];
}

impl Elements for SendOp {
    fn used(&self) -> &[Sge] {
        self.sges()
    }
    fn elements(&mut self) -> &mut [Sge] {
        let n = self.num_sge.min(self.sges.len());
        &mut self.sges[..n]
    }
}

impl Elements for RecvOp {
    fn used(&self) -> &[Sge] {
        self.sges()
    }
    fn elements(&mut self) -> &mut [Sge] {
        let n = self.num_sge.min(self.sges.len());
        &mut self.sges[..n]
    }
}

/// Whether any of `ops` names a rebased key.
#[inline]
pub(crate) fn any_rebased<O: Elements>(ops: &[O]) -> bool {
    ops.iter().any(|op| rebased(op.used()))
}

/// `ops` translated, handed to `post` in one call (so a failure means
/// none went, as the caller expects): on the stack for up to [`BATCH`]
/// (the channel posts at most 16 at a time), on the heap beyond.
pub(crate) fn translated<O: Elements>(
    dir: &KeyDirectory,
    ops: &[O],
    post: impl FnOnce(&[O]) -> TransportResult<()>,
) -> TransportResult<()> {
    let Some(&first) = ops.first() else {
        return post(ops);
    };
    let mut stack = [first; BATCH];
    let mut heap = Vec::new();
    let buf: &mut [O] = if ops.len() <= BATCH {
        stack[..ops.len()].copy_from_slice(ops);
        &mut stack[..ops.len()]
    } else {
        heap.extend_from_slice(ops);
        &mut heap
    };
    for op in buf.iter_mut() {
        dir.localize(op.elements())?;
    }
    post(buf)
}
