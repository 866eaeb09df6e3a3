//! Work requests: what to send, write, receive or read, and where.

use ferrovia_mr::RemoteMemoryRegion;
use ferrovia_types::AccessFlags;

use crate::element::{Gather, Scatter};
use crate::error::{TransportError, TransportResult};

/// Most buffer elements one request carries.
pub const MAX_ELEMENTS: usize = 4;

fn check_count(count: usize) -> TransportResult<()> {
    if count > MAX_ELEMENTS {
        return Err(TransportError::TooManyElements {
            count,
            max: MAX_ELEMENTS,
        });
    }
    Ok(())
}

fn gather_len(g: &[Gather<'_>]) -> u64 {
    g.iter().map(|e| e.len() as u64).sum()
}

/// Whether the region's owner granted `right` for the operation `op`.
pub(crate) fn check_right(
    remote: &RemoteMemoryRegion,
    right: AccessFlags,
    op: &'static str,
) -> TransportResult<()> {
    if !remote.allows(right) {
        return Err(TransportError::RemoteAccessDenied {
            op,
            granted: remote.access(),
        });
    }
    Ok(())
}

pub(crate) fn fits_remote(local: u64, remote: &RemoteMemoryRegion) -> TransportResult<()> {
    if local > remote.len() {
        return Err(TransportError::RemoteTooSmall {
            local,
            remote: remote.len(),
        });
    }
    Ok(())
}

/// A two-sided send of the gathered bytes, optionally with an immediate.
#[derive(Debug, Clone, Copy)]
pub struct SendWorkRequest<'wr, 'env> {
    pub(crate) gather: &'wr [Gather<'env>],
    pub(crate) imm: Option<u32>,
}

impl<'wr, 'env> SendWorkRequest<'wr, 'env> {
    /// Sends the bytes of `gather`, in order, as one message (an empty
    /// list sends a zero-byte message).
    pub fn new(gather: &'wr [Gather<'env>]) -> TransportResult<Self> {
        check_count(gather.len())?;
        Ok(SendWorkRequest { gather, imm: None })
    }

    /// Also delivers `imm` to the receiver's completion.
    pub fn with_imm(mut self, imm: u32) -> Self {
        self.imm = Some(imm);
        self
    }
}

/// A one-sided RDMA write of the gathered bytes into a peer's memory,
/// optionally with an immediate (which consumes a receive at the peer).
#[derive(Debug, Clone, Copy)]
pub struct WriteWorkRequest<'wr, 'env> {
    pub(crate) gather: &'wr [Gather<'env>],
    pub(crate) remote: RemoteMemoryRegion,
    pub(crate) imm: Option<u32>,
}

impl<'wr, 'env> WriteWorkRequest<'wr, 'env> {
    /// Writes the bytes of `gather` to the start of `remote`, which must
    /// be large enough.
    pub fn new(gather: &'wr [Gather<'env>], remote: RemoteMemoryRegion) -> TransportResult<Self> {
        check_count(gather.len())?;
        check_right(&remote, AccessFlags::REMOTE_WRITE, "an RDMA write")?;
        fits_remote(gather_len(gather), &remote)?;
        Ok(WriteWorkRequest {
            gather,
            remote,
            imm: None,
        })
    }

    /// Also delivers `imm` to the peer, consuming one of its receives.
    pub fn with_imm(mut self, imm: u32) -> Self {
        self.imm = Some(imm);
        self
    }
}

/// Up to [`MAX_ELEMENTS`] scatter elements, owned by the request.
#[derive(Debug)]
pub(crate) struct Scatters<'env> {
    pub(crate) items: [Option<Scatter<'env>>; MAX_ELEMENTS],
    pub(crate) len: usize,
}

impl<'env> Scatters<'env> {
    fn collect(elements: impl IntoIterator<Item = Scatter<'env>>) -> TransportResult<Self> {
        let mut s = Scatters {
            items: Default::default(),
            len: 0,
        };
        for e in elements {
            check_count(s.len + 1)?;
            s.items[s.len] = Some(e);
            s.len += 1;
        }
        Ok(s)
    }

    pub(crate) fn total_len(&self) -> u64 {
        self.items.iter().flatten().map(|e| e.len() as u64).sum()
    }
}

/// A receive: the buffers the next incoming send (or write with
/// immediate) lands in. The buffers move into the request; the completed
/// work hands them back.
#[derive(Debug)]
pub struct ReceiveWorkRequest<'env> {
    pub(crate) scatter: Scatters<'env>,
}

impl<'env> ReceiveWorkRequest<'env> {
    /// A receive into one buffer.
    pub fn new(buf: Scatter<'env>) -> Self {
        let mut items: [Option<Scatter<'env>>; MAX_ELEMENTS] = Default::default();
        items[0] = Some(buf);
        ReceiveWorkRequest {
            scatter: Scatters { items, len: 1 },
        }
    }

    /// A receive scattering over several buffers, in order.
    pub fn scatter(bufs: impl IntoIterator<Item = Scatter<'env>>) -> TransportResult<Self> {
        Ok(ReceiveWorkRequest {
            scatter: Scatters::collect(bufs)?,
        })
    }

    /// A receive with no buffer: for zero-byte sends and RDMA writes with
    /// immediate, which only deliver their immediate.
    pub fn empty() -> Self {
        ReceiveWorkRequest {
            scatter: Scatters {
                items: Default::default(),
                len: 0,
            },
        }
    }
}

/// A one-sided RDMA read of a peer's memory into local buffers.
#[derive(Debug)]
pub struct ReadWorkRequest<'env> {
    pub(crate) scatter: Scatters<'env>,
    pub(crate) remote: RemoteMemoryRegion,
}

impl<'env> ReadWorkRequest<'env> {
    /// Reads `buf.len()` bytes from the start of `remote` into `buf`.
    pub fn new(buf: Scatter<'env>, remote: RemoteMemoryRegion) -> TransportResult<Self> {
        Self::scatter([buf], remote)
    }

    /// Reads from the start of `remote` into several buffers, in order.
    pub fn scatter(
        bufs: impl IntoIterator<Item = Scatter<'env>>,
        remote: RemoteMemoryRegion,
    ) -> TransportResult<Self> {
        let scatter = Scatters::collect(bufs)?;
        check_right(&remote, AccessFlags::REMOTE_READ, "an RDMA read")?;
        fits_remote(scatter.total_len(), &remote)?;
        Ok(ReadWorkRequest { scatter, remote })
    }
}

/// A [`SendWorkRequest`] addressed to peer `peer` of a multi-peer channel.
#[derive(Debug, Clone, Copy)]
pub struct PeerSendWorkRequest<'wr, 'env> {
    /// Peer index.
    pub peer: usize,
    /// The request.
    pub wr: SendWorkRequest<'wr, 'env>,
}

/// A [`WriteWorkRequest`] addressed to a peer.
#[derive(Debug, Clone, Copy)]
pub struct PeerWriteWorkRequest<'wr, 'env> {
    /// Peer index.
    pub peer: usize,
    /// The request.
    pub wr: WriteWorkRequest<'wr, 'env>,
}

/// A [`ReceiveWorkRequest`] for a message from a peer.
#[derive(Debug)]
pub struct PeerReceiveWorkRequest<'env> {
    /// Peer index.
    pub peer: usize,
    /// The request.
    pub wr: ReceiveWorkRequest<'env>,
}

/// A [`ReadWorkRequest`] from a peer's memory.
#[derive(Debug)]
pub struct PeerReadWorkRequest<'env> {
    /// Peer index.
    pub peer: usize,
    /// The request.
    pub wr: ReadWorkRequest<'env>,
}

impl<'wr, 'env> PeerSendWorkRequest<'wr, 'env> {
    /// `wr` to `peer`.
    pub fn new(peer: usize, wr: SendWorkRequest<'wr, 'env>) -> Self {
        PeerSendWorkRequest { peer, wr }
    }
}

impl<'wr, 'env> PeerWriteWorkRequest<'wr, 'env> {
    /// `wr` to `peer`.
    pub fn new(peer: usize, wr: WriteWorkRequest<'wr, 'env>) -> Self {
        PeerWriteWorkRequest { peer, wr }
    }
}

impl<'env> PeerReceiveWorkRequest<'env> {
    /// `wr` from `peer`.
    pub fn new(peer: usize, wr: ReceiveWorkRequest<'env>) -> Self {
        PeerReceiveWorkRequest { peer, wr }
    }
}

impl<'env> PeerReadWorkRequest<'env> {
    /// `wr` from `peer`.
    pub fn new(peer: usize, wr: ReadWorkRequest<'env>) -> Self {
        PeerReadWorkRequest { peer, wr }
    }
}
