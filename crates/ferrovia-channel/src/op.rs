//! What the core hands a transport: plain, `Copy` operations and
//! completions, independent of verbs or UCX types.

use ferrovia_types::{Sge, WcStatus};

use crate::request::MAX_ELEMENTS;

/// The kind of a send-queue operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Two-sided send.
    Send,
    /// One-sided RDMA write.
    Write,
    /// One-sided RDMA read.
    Read,
    /// Remote fetch-and-add on an 8-byte word: the original value is
    /// written into the one 8-byte local element.
    FetchAdd,
    /// Remote compare-and-swap on an 8-byte word: the original value is
    /// written into the one 8-byte local element.
    CompareSwap,
}

impl OpKind {
    /// Whether the device writes the local elements (reads and atomics).
    #[inline]
    pub fn writes_locally(self) -> bool {
        matches!(self, OpKind::Read | OpKind::FetchAdd | OpKind::CompareSwap)
    }
}

/// A send-queue operation.
#[derive(Debug, Clone, Copy)]
pub struct SendOp {
    /// Identifies the operation in its completion.
    pub wr_id: u64,
    /// What it does.
    pub kind: OpKind,
    /// Local buffers (gathered for send/write, scattered for read, the
    /// 8-byte result of an atomic).
    pub sges: [Sge; MAX_ELEMENTS],
    /// How many of `sges` are used.
    pub num_sge: usize,
    /// Remote address (write/read/atomic).
    pub remote_addr: u64,
    /// Remote key (write/read/atomic).
    pub rkey: u32,
    /// Atomics: the value added (fetch-and-add) or compared
    /// (compare-and-swap).
    pub compare_add: u64,
    /// Compare-and-swap: the value stored if the comparison holds.
    pub swap: u64,
    /// Immediate data (send/write).
    pub imm: Option<u32>,
    /// Whether it produces a completion of its own.
    pub signaled: bool,
    /// Whether the payload may be copied at post time.
    pub inline: bool,
}

impl SendOp {
    /// The used SGEs.
    #[inline]
    pub fn sges(&self) -> &[Sge] {
        &self.sges[..self.num_sge.min(MAX_ELEMENTS)]
    }
}

/// A receive-queue operation.
#[derive(Debug, Clone, Copy)]
pub struct RecvOp {
    /// Identifies the operation in its completion.
    pub wr_id: u64,
    /// Buffers to scatter the message into.
    pub sges: [Sge; MAX_ELEMENTS],
    /// How many of `sges` are used.
    pub num_sge: usize,
}

impl RecvOp {
    /// The used SGEs.
    #[inline]
    pub fn sges(&self) -> &[Sge] {
        &self.sges[..self.num_sge.min(MAX_ELEMENTS)]
    }
}

/// A completion as the core sees it; statuses use the verbs vocabulary on
/// every transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The operation's `wr_id`.
    pub wr_id: u64,
    /// Its status.
    pub status: WcStatus,
    /// The transport's own error detail.
    pub vendor_err: u32,
    /// Bytes received (receives).
    pub byte_len: u32,
    /// Immediate data delivered (receives).
    pub imm: Option<u32>,
    /// The sending peer of a receive from the shared pool (the transport
    /// fills it in; the core knows every other request's peer itself).
    pub peer: Option<u32>,
}

impl Default for Completion {
    fn default() -> Self {
        Completion {
            wr_id: 0,
            status: WcStatus::SUCCESS,
            vendor_err: 0,
            byte_len: 0,
            imm: None,
            peer: None,
        }
    }
}

/// Requests one doorbell carries at most.
pub(crate) const CHUNK: usize = 16;

/// A send op that does nothing, to fill arrays of ops.
pub(crate) const EMPTY_OP: SendOp = SendOp {
    wr_id: 0,
    kind: OpKind::Send,
    sges: [Sge::new(0, 0, 0); MAX_ELEMENTS],
    num_sge: 0,
    remote_addr: 0,
    rkey: 0,
    compare_add: 0,
    swap: 0,
    imm: None,
    signaled: true,
    inline: false,
};
