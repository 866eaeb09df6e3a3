//! Buffer elements of work requests: gathers read, scatters are written.

use std::marker::PhantomData;
use std::ops::Range;
use std::ptr::NonNull;

use ferrovia_mr::{Access, Local, MemoryRegionView, MrError, RegisteredMemory, Registration};
use ferrovia_types::{AccessFlags, Sge};

use crate::error::{TransportError, TransportResult};

fn sge_for(reg: &Registration<'_>, bytes: &[u8]) -> TransportResult<Sge> {
    sge_of(reg.view_of(bytes)?)
}

/// The element of a view: the NIC addresses local memory in the
/// registration's RDMA address space (which differs from the virtual one
/// when zero-based).
pub(crate) fn sge_of(view: MemoryRegionView) -> TransportResult<Sge> {
    let len = u32::try_from(view.size).map_err(|_| TransportError::TooLong { len: view.size })?;
    Ok(Sge::new(view.rdma_addr as u64, len, view.lkey))
}

/// Bytes a request reads (sends, RDMA writes): borrowed for `'env`, with
/// their registration's key.
#[derive(Clone, Copy, Debug)]
pub struct Gather<'env> {
    pub(crate) sge: Sge,
    _bytes: PhantomData<&'env [u8]>,
}

impl Gather<'_> {
    /// A gather element of an owned request's buffer (`crate::owned`),
    /// which the engine keeps alive instead of a borrow.
    pub(crate) fn owned(sge: Sge) -> Gather<'static> {
        Gather {
            sge,
            _bytes: PhantomData,
        }
    }
}

/// The element of `range` of a registered buffer, checked.
pub(crate) fn sge_of_range<A: Access>(
    buf: &RegisteredMemory<'_, A>,
    range: Range<usize>,
) -> TransportResult<Sge> {
    let (addr, _) = buf.checked_range(range.clone())?;
    let view = buf
        .registration()
        .view_at(addr - buf.registration().addr(), range.len())?;
    sge_of(view)
}

impl<'env> Gather<'env> {
    /// `bytes`, which must lie inside `reg`.
    pub fn new(reg: &'env Registration<'_>, bytes: &'env [u8]) -> TransportResult<Gather<'env>> {
        Ok(Gather {
            sge: sge_for(reg, bytes)?,
            _bytes: PhantomData,
        })
    }

    /// All of a registered buffer, [`Local`] or
    /// [`Shared`](ferrovia_mr::Shared). (The device reads shared memory
    /// as it finds it: a peer's write or the program's atomic store while
    /// the request is posted may or may not be sent.)
    pub fn of<A: Access>(buf: &'env RegisteredMemory<'_, A>) -> TransportResult<Gather<'env>> {
        Self::range(buf, 0..buf.len())
    }

    /// `range` of a registered buffer.
    pub fn range<A: Access>(
        buf: &'env RegisteredMemory<'_, A>,
        range: Range<usize>,
    ) -> TransportResult<Gather<'env>> {
        Ok(Gather {
            sge: sge_of_range(buf, range)?,
            _bytes: PhantomData,
        })
    }

    /// `range` of device memory (a dma-buf registration,
    /// `MrRegistry::register_dmabuf`), which has no bytes in this process
    /// to borrow: the registration is borrowed instead, so it stays
    /// registered until the request is done. Only device memory: memory
    /// of this process goes through [`Gather::new`] or [`Gather::range`].
    pub fn device(
        reg: &'env Registration<'_>,
        range: Range<usize>,
    ) -> TransportResult<Gather<'env>> {
        if !reg.is_device_memory() {
            return Err(MrError::AccessNotGranted {
                what: "Gather::device",
                needed: "a device-memory (dma-buf) registration",
            }
            .into());
        }
        Ok(Gather {
            sge: sge_of(reg.view_at(range.start, range.len())?)?,
            _bytes: PhantomData,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.sge.length() as usize
    }

    /// Whether it is empty (never: empty ranges are refused).
    pub fn is_empty(&self) -> bool {
        self.sge.length() == 0
    }
}

/// Bytes a request writes (receives, RDMA reads): mutably borrowed for
/// `'env` and moved into the request, so nothing else can touch them until
/// the request completes and hands them back.
#[derive(Debug)]
pub struct Scatter<'env> {
    pub(crate) sge: Sge,
    pub(crate) ptr: NonNull<u8>,
    _bytes: PhantomData<&'env mut [u8]>,
}

// SAFETY: a Scatter is an exclusive borrow of bytes, like `&'env mut [u8]`.
unsafe impl Send for Scatter<'_> {}

impl<'env> Scatter<'env> {
    /// `bytes`, which must lie inside `reg`, registered with local write.
    pub fn new(
        reg: &'env Registration<'_>,
        bytes: &'env mut [u8],
    ) -> TransportResult<Scatter<'env>> {
        if !reg.access().contains(AccessFlags::LOCAL_WRITE) {
            return Err(MrError::AccessNotGranted {
                what: "a receive or read buffer",
                needed: "LOCAL_WRITE",
            }
            .into());
        }
        Ok(Scatter {
            sge: sge_for(reg, bytes)?,
            ptr: NonNull::from(&mut *bytes).cast(),
            _bytes: PhantomData,
        })
    }

    /// All of a registered [`Local`] buffer. (Shared memory cannot be a
    /// receive or read target: the completed request hands the bytes back
    /// as a slice.)
    pub fn of(buf: &'env mut RegisteredMemory<'_, Local>) -> TransportResult<Scatter<'env>> {
        let (bytes, reg) = buf.split_mut();
        Self::new(reg, bytes)
    }

    /// `range` of a registered [`Local`] buffer.
    pub fn range(
        buf: &'env mut RegisteredMemory<'_, Local>,
        range: Range<usize>,
    ) -> TransportResult<Scatter<'env>> {
        let err = out_of(buf, &range);
        let (bytes, reg) = buf.split_mut();
        let bytes = bytes.get_mut(range).ok_or(err)?;
        Self::new(reg, bytes)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.sge.length() as usize
    }

    /// The bytes, to read (for instance what a receive handed back) before
    /// posting the element again.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a Scatter owns an exclusive borrow of these bytes; while
        // it is not posted nothing else touches them.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len()) }
    }

    /// The bytes, borrowed for the rest of `'env` (after the request that
    /// held them completed).
    pub fn into_bytes(self) -> &'env mut [u8] {
        // SAFETY: a Scatter is an exclusive `&'env mut [u8]` of
        // `sge.length()` bytes at `ptr`, taken apart; this puts it back.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len()) }
    }

    /// Rebuilds a scatter element from its parts.
    ///
    /// # Safety
    /// `ptr` and `sge` must come from a `Scatter<'env>` that was moved into
    /// a request which has completed, and be used to rebuild it once.
    pub(crate) unsafe fn from_raw(ptr: NonNull<u8>, sge: Sge) -> Scatter<'env> {
        Scatter {
            sge,
            ptr,
            _bytes: PhantomData,
        }
    }

    /// Whether it is empty (never: empty ranges are refused).
    pub fn is_empty(&self) -> bool {
        self.sge.length() == 0
    }
}

fn out_of(buf: &RegisteredMemory<'_, Local>, range: &Range<usize>) -> TransportError {
    MrError::OutOfRange {
        id: buf.registration().id(),
        offset: range.start as u64,
        len: range.end.saturating_sub(range.start) as u64,
        size: buf.len() as u64,
    }
    .into()
}
