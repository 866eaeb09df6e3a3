//! Work-completion status: the code, its class and a one-line hint.

use std::fmt;

/// The status of a work completion (`enum ibv_wc_status`).
///
/// Kept as the raw code so an unknown value from a driver is representable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WcStatus(pub u32);

/// What kind of failure a [`WcStatus`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcClass {
    /// The request completed.
    Success,
    /// The QP went to the error state before the request was processed.
    Flushed,
    /// A local SGE is outside its MR or the lkey is wrong.
    LocalProtection,
    /// A receive buffer is too small, or a message too long.
    LocalLength,
    /// Another local error (QP operation, access, memory window).
    LocalOperation,
    /// The remote side refused the access (rkey, range or permission).
    RemoteAccess,
    /// The remote side found the request invalid.
    RemoteInvalidRequest,
    /// The remote side failed to complete the operation.
    RemoteOperation,
    /// The transport retry count was exceeded: the peer did not answer.
    RetryExceeded,
    /// The peer had no receive posted for longer than the RNR retries.
    ReceiverNotReady,
    /// A fatal or unclassified transport error.
    Fatal,
}

impl WcStatus {
    /// `IBV_WC_SUCCESS`.
    pub const SUCCESS: WcStatus = WcStatus(0);
    /// `IBV_WC_LOC_LEN_ERR`: a message longer than its receive.
    pub const LOC_LEN_ERR: WcStatus = WcStatus(1);
    /// `IBV_WC_LOC_QP_OP_ERR`.
    pub const LOC_QP_OP_ERR: WcStatus = WcStatus(2);
    /// `IBV_WC_LOC_PROT_ERR`: a local element outside its registration.
    pub const LOC_PROT_ERR: WcStatus = WcStatus(4);
    /// `IBV_WC_WR_FLUSH_ERR`: flushed by an error state.
    pub const WR_FLUSH_ERR: WcStatus = WcStatus(5);
    /// `IBV_WC_LOC_ACCESS_ERR`.
    pub const LOC_ACCESS_ERR: WcStatus = WcStatus(8);
    /// `IBV_WC_REM_INV_REQ_ERR`.
    pub const REM_INV_REQ_ERR: WcStatus = WcStatus(9);
    /// `IBV_WC_REM_ACCESS_ERR`: the peer refused the access.
    pub const REM_ACCESS_ERR: WcStatus = WcStatus(10);
    /// `IBV_WC_REM_OP_ERR`.
    pub const REM_OP_ERR: WcStatus = WcStatus(11);
    /// `IBV_WC_RETRY_EXC_ERR`: the peer did not answer.
    pub const RETRY_EXC_ERR: WcStatus = WcStatus(12);
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: the peer had no receive posted.
    pub const RNR_RETRY_EXC_ERR: WcStatus = WcStatus(13);
    /// `IBV_WC_GENERAL_ERR`.
    pub const GENERAL_ERR: WcStatus = WcStatus(21);

    /// The numeric code.
    pub fn code(self) -> u32 {
        self.0
    }

    /// Whether this is `IBV_WC_SUCCESS`.
    pub fn is_success(self) -> bool {
        self.0 == 0
    }

    /// The rdma-core name, e.g. `IBV_WC_REM_ACCESS_ERR`.
    pub fn name(self) -> &'static str {
        self.info().0
    }

    /// The class of failure.
    pub fn class(self) -> WcClass {
        self.info().1
    }

    /// A one-line hint at the usual cause.
    pub fn hint(self) -> &'static str {
        self.info().2
    }

    fn info(self) -> (&'static str, WcClass, &'static str) {
        use WcClass::*;
        match self.0 {
            0 => ("IBV_WC_SUCCESS", Success, "completed"),
            1 => (
                "IBV_WC_LOC_LEN_ERR",
                LocalLength,
                "the message is longer than the receive buffer posted for it",
            ),
            2 => (
                "IBV_WC_LOC_QP_OP_ERR",
                LocalOperation,
                "the work request is invalid for this QP (too many SGEs, inline too large, wrong state)",
            ),
            3 => (
                "IBV_WC_LOC_EEC_OP_ERR",
                LocalOperation,
                "local EE context operation error",
            ),
            4 => (
                "IBV_WC_LOC_PROT_ERR",
                LocalProtection,
                "a local SGE lies outside its memory region or uses a wrong lkey",
            ),
            5 => (
                "IBV_WC_WR_FLUSH_ERR",
                Flushed,
                "the QP entered the error state before this request ran (see the first failed completion)",
            ),
            6 => (
                "IBV_WC_MW_BIND_ERR",
                LocalOperation,
                "memory window bind failed",
            ),
            7 => (
                "IBV_WC_BAD_RESP_ERR",
                Fatal,
                "unexpected transport response from the peer",
            ),
            8 => (
                "IBV_WC_LOC_ACCESS_ERR",
                LocalOperation,
                "the local MR lacks the access the operation needs (e.g. LOCAL_WRITE for a receive)",
            ),
            9 => (
                "IBV_WC_REM_INV_REQ_ERR",
                RemoteInvalidRequest,
                "the peer found the request invalid (e.g. message larger than its receive buffer)",
            ),
            10 => (
                "IBV_WC_REM_ACCESS_ERR",
                RemoteAccess,
                "the peer refused the access: wrong rkey, range outside its MR, or missing remote permission",
            ),
            11 => (
                "IBV_WC_REM_OP_ERR",
                RemoteOperation,
                "the peer could not complete the operation",
            ),
            12 => (
                "IBV_WC_RETRY_EXC_ERR",
                RetryExceeded,
                "the peer did not answer: it is gone, unreachable, or its QP is not connected",
            ),
            13 => (
                "IBV_WC_RNR_RETRY_EXC_ERR",
                ReceiverNotReady,
                "the peer had no receive posted (receiver not ready) for longer than the RNR retries",
            ),
            14 => (
                "IBV_WC_LOC_RDD_VIOL_ERR",
                LocalOperation,
                "local RDD violation",
            ),
            15 => (
                "IBV_WC_REM_INV_RD_REQ_ERR",
                RemoteInvalidRequest,
                "the peer found the RDMA read request invalid",
            ),
            16 => (
                "IBV_WC_REM_ABORT_ERR",
                RemoteOperation,
                "the peer aborted the operation",
            ),
            17 => ("IBV_WC_INV_EECN_ERR", Fatal, "invalid EE context number"),
            18 => (
                "IBV_WC_INV_EEC_STATE_ERR",
                Fatal,
                "invalid EE context state",
            ),
            19 => ("IBV_WC_FATAL_ERR", Fatal, "fatal device error"),
            20 => ("IBV_WC_RESP_TIMEOUT_ERR", Fatal, "response timeout"),
            21 => (
                "IBV_WC_GENERAL_ERR",
                Fatal,
                "general error reported by the driver",
            ),
            22 => ("IBV_WC_TM_ERR", LocalOperation, "tag-matching error"),
            23 => (
                "IBV_WC_TM_RNDV_INCOMPLETE",
                LocalOperation,
                "tag-matching rendezvous incomplete",
            ),
            _ => (
                "IBV_WC_UNKNOWN",
                Fatal,
                "status code unknown to this version of ferrovia",
            ),
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (status {}, {:?}): {}",
            self.name(),
            self.0,
            self.class(),
            self.hint()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_names() {
        assert_eq!(WcStatus(10).class(), WcClass::RemoteAccess);
        assert_eq!(WcStatus(4).class(), WcClass::LocalProtection);
        assert_eq!(WcStatus::WR_FLUSH_ERR.class(), WcClass::Flushed);
        assert_eq!(WcStatus(13).name(), "IBV_WC_RNR_RETRY_EXC_ERR");
        assert!(WcStatus::SUCCESS.is_success());
        assert_eq!(WcStatus(999).class(), WcClass::Fatal);
        let shown = WcStatus(10).to_string();
        assert!(
            shown.contains("IBV_WC_REM_ACCESS_ERR") && shown.contains("status 10"),
            "{shown}"
        );
    }
}
