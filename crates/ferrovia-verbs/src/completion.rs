//! One work completion (`struct ibv_wc`), read through accessors.

use ferrovia_sys as sys;

use ferrovia_types::{CompletionError, WcOpcode, WcStatus};

/// A work completion, laid out exactly as `struct ibv_wc` so a batch polls
/// straight into a caller's buffer.
#[derive(Clone, Copy, Default)]
#[repr(transparent)]
pub struct WorkCompletion(pub(crate) sys::ibv_wc);

impl WorkCompletion {
    /// The `wr_id` the request was posted with.
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }

    /// The completion status.
    pub fn status(&self) -> WcStatus {
        WcStatus(self.0.status.0)
    }

    /// Whether it succeeded.
    pub fn is_success(&self) -> bool {
        self.status().is_success()
    }

    /// `Ok(self)` on success, else the typed error.
    pub fn result(&self) -> Result<&Self, CompletionError> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(self.error())
        }
    }

    /// The completion as a [`CompletionError`] (meaningful when it failed).
    pub fn error(&self) -> CompletionError {
        CompletionError::new(self.wr_id(), self.status(), self.0.vendor_err)
    }

    /// What the request was. Only valid on success (ibv_poll_cq(3)).
    pub fn opcode(&self) -> WcOpcode {
        use sys::ibv_wc_opcode as O;
        match self.0.opcode {
            O::IBV_WC_SEND => WcOpcode::Send,
            O::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            O::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
            O::IBV_WC_COMP_SWAP | O::IBV_WC_FETCH_ADD => WcOpcode::Atomic,
            O::IBV_WC_RECV => WcOpcode::Recv,
            O::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            o => WcOpcode::Other(o.0),
        }
    }

    /// Bytes received (receive completions).
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }

    /// The immediate value, if the message carried one, in the byte order
    /// the sender passed it to ferrovia (the wire carries it big-endian).
    pub fn imm_data(&self) -> Option<u32> {
        let with_imm = sys::ibv_wc_flags::IBV_WC_WITH_IMM.0;
        // SAFETY: imm_data is the active member when IBV_WC_WITH_IMM is set;
        // both members are plain u32 anyway.
        (self.0.wc_flags & with_imm != 0)
            .then(|| u32::from_be(unsafe { self.0.__bindgen_anon_1.imm_data }))
    }

    /// The key of the memory window the sender invalidated with this
    /// message (a receive completion of a send with invalidate).
    pub fn invalidated_rkey(&self) -> Option<u32> {
        let with_inv = sys::ibv_wc_flags::IBV_WC_WITH_INV.0;
        // SAFETY: the union holds the invalidated rkey when
        // IBV_WC_WITH_INV is set; both members are plain u32 anyway.
        let rkey = unsafe { self.0.__bindgen_anon_1.invalidated_rkey };
        (self.0.wc_flags & with_inv != 0).then_some(rkey)
    }

    /// The sending queue pair of a datagram (UD receive completions).
    pub fn src_qp(&self) -> u32 {
        self.0.src_qp
    }

    /// Whether a datagram's receive buffer begins with the packet's global
    /// route header (`IBV_WC_GRH`); if not, its first 40 bytes are
    /// undefined, and `byte_len` does not count them.
    pub fn has_grh(&self) -> bool {
        self.0.wc_flags & sys::ibv_wc_flags::IBV_WC_GRH.0 != 0
    }

    /// The local QP number the request belonged to.
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }
}

impl std::fmt::Debug for WorkCompletion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkCompletion")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status().name())
            .field("opcode", &self.opcode())
            .field("byte_len", &self.byte_len())
            .field("imm_data", &self.imm_data())
            .field("qp_num", &self.qp_num())
            .finish()
    }
}
