//! What a completed work request was.

/// What a completed work request was (`enum ibv_wc_opcode`, grouped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcOpcode {
    /// A send (with or without immediate).
    Send,
    /// An RDMA write (with or without immediate) on the requester.
    RdmaWrite,
    /// An RDMA read on the requester.
    RdmaRead,
    /// An atomic.
    Atomic,
    /// A receive consumed by a send.
    Recv,
    /// A receive consumed by an RDMA write with immediate.
    RecvRdmaWithImm,
    /// Another opcode, raw.
    Other(u32),
}
