//! UCX status values: [`Status`], what an `*_nbx` call returned (the
//! `UCS_PTR_*` macros rewritten in Rust), how a UCX status reads in the
//! verbs completion vocabulary the core speaks, and as a [`UcxError`].

use std::ffi::CStr;
use std::fmt;
use std::net::SocketAddr;
use std::ptr::NonNull;

use ferrovia_types::WcStatus;

use super::ffi;
use super::request::Request;
use crate::error::UcxError;

/// A `ucs_status_t`. It prints as the number, as UCX's own does.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct Status(pub(super) ffi::ucs_status_t);

impl Status {
    /// Success.
    pub(crate) const OK: Status = Status(ffi::UCS_OK);
    /// The operation was cancelled (a flush, a close).
    pub(crate) const CANCELED: Status = Status(ffi::UCS_ERR_CANCELED);
    /// A parameter is invalid.
    pub(crate) const INVALID_PARAM: Status = Status(ffi::UCS_ERR_INVALID_PARAM);
    /// No transport reaches the destination.
    pub(crate) const UNREACHABLE: Status = Status(ffi::UCS_ERR_UNREACHABLE);
    /// The connection was closed or reset.
    pub(crate) const CONNECTION_RESET: Status = Status(ffi::UCS_ERR_CONNECTION_RESET);
    /// A message was longer than its receive.
    pub(crate) const MESSAGE_TRUNCATED: Status = Status(ffi::UCS_ERR_MESSAGE_TRUNCATED);
    /// Timed out.
    pub(crate) const TIMED_OUT: Status = Status(ffi::UCS_ERR_TIMED_OUT);
    /// No connection could be made.
    pub(crate) const NOT_CONNECTED: Status = Status(ffi::UCS_ERR_NOT_CONNECTED);
    /// The peer rejected the connection.
    pub(crate) const REJECTED: Status = Status(ffi::UCS_ERR_REJECTED);
    /// The endpoint's peer stopped answering.
    pub(crate) const ENDPOINT_TIMEOUT: Status = Status(ffi::UCS_ERR_ENDPOINT_TIMEOUT);

    /// The `ucs_status_t` code.
    #[inline]
    pub(crate) fn code(self) -> i8 {
        self.0
    }

    /// UCX's own description (`ucs_status_string`).
    pub(crate) fn message(self) -> String {
        // SAFETY: ucs_status_string returns a static NUL-terminated string
        // for any status value.
        unsafe { CStr::from_ptr(ffi::ucs_status_string(self.0)) }
            .to_string_lossy()
            .into_owned()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// What a `ucs_status_ptr_t` returned by an `*_nbx` call means.
pub(crate) enum Started {
    /// Completed inside the call; no callback will run.
    Done,
    /// In flight; its callback will run (and free it).
    Pending(Request),
    /// Failed inside the call; no callback will run.
    Failed(Status),
}

/// `UCS_PTR_IS_PTR` / `UCS_PTR_IS_ERR` / `UCS_PTR_STATUS`.
#[inline]
pub(super) fn started(p: ffi::ucs_status_ptr_t) -> Started {
    let v = p as isize;
    match NonNull::new(p) {
        None => Started::Done,
        Some(_) if (ffi::UCS_ERR_LAST as isize..0).contains(&v) => {
            Started::Failed(Status(v as ffi::ucs_status_t))
        }
        Some(p) => Started::Pending(Request(p)),
    }
}

// ibv_wc_status codes used below (verbs.h).
const LOC_LEN_ERR: u32 = 1;
const WR_FLUSH_ERR: u32 = 5;
const REM_ACCESS_ERR: u32 = 10;
const RETRY_EXC_ERR: u32 = 12;
const GENERAL_ERR: u32 = 21;

/// The verbs status a UCX status corresponds to; the UCX status itself
/// travels as the completion's vendor error.
pub(crate) fn wc_status(status: Status) -> WcStatus {
    WcStatus(match status.0 {
        ffi::UCS_OK => 0,
        ffi::UCS_ERR_MESSAGE_TRUNCATED => LOC_LEN_ERR,
        ffi::UCS_ERR_CANCELED => WR_FLUSH_ERR,
        // REMOTE_ACCESS
        ffi::UCS_ERR_NO_ELEM => REM_ACCESS_ERR,
        ffi::UCS_ERR_UNREACHABLE
        | ffi::UCS_ERR_CONNECTION_RESET
        | ffi::UCS_ERR_NOT_CONNECTED
        | ffi::UCS_ERR_REJECTED
        | ffi::UCS_ERR_TIMED_OUT
        | ffi::UCS_ERR_IO_ERROR => RETRY_EXC_ERR,
        s if (ffi::UCS_ERR_LAST_ENDPOINT_FAILURE..=ffi::UCS_ERR_FIRST_ENDPOINT_FAILURE)
            .contains(&s) =>
        {
            RETRY_EXC_ERR
        }
        s if (ffi::UCS_ERR_LAST_LINK_FAILURE..=ffi::UCS_ERR_FIRST_LINK_FAILURE).contains(&s) => {
            RETRY_EXC_ERR
        }
        _ => GENERAL_ERR,
    })
}

/// The status this transport gives an access the remote key directory
/// refused (unknown key, range or permission): UCX has none of its own.
pub(crate) const REMOTE_ACCESS: Status = Status(ffi::UCS_ERR_NO_ELEM);

/// The vendor-error form of a status (its two's-complement bits).
pub(crate) fn vendor_err(status: Status) -> u32 {
    i32::from(status.0) as u32
}

/// The error of the UCX function `op` that returned `status`.
pub(crate) fn status_error(op: &'static str, status: Status) -> UcxError {
    UcxError::Status {
        op,
        status: status.0,
        message: status.message(),
    }
}

/// A failed status of a call about `addr`.
pub(crate) fn addr_error(op: &'static str, addr: SocketAddr, status: Status) -> UcxError {
    match status_error(op, status) {
        UcxError::Status {
            op,
            status,
            message,
        } => UcxError::Addr {
            op,
            addr,
            status,
            message,
        },
        other => other,
    }
}

/// `Ok` for `UCS_OK`, else the error of `op`.
pub(crate) fn check(op: &'static str, status: Status) -> Result<(), UcxError> {
    if status == Status::OK {
        Ok(())
    } else {
        Err(status_error(op, status))
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::c_void;

    use super::*;

    #[test]
    fn status_pointers_decode_like_the_macros() {
        assert!(matches!(started(std::ptr::null_mut()), Started::Done));
        let err = ffi::UCS_ERR_CANCELED as isize as ffi::ucs_status_ptr_t;
        assert!(matches!(started(err), Started::Failed(Status::CANCELED)));
        let mut x = 0u8;
        let p = (&raw mut x).cast::<c_void>();
        assert!(matches!(started(p), Started::Pending(q) if q.0.as_ptr() == p));
    }

    #[test]
    fn statuses_map_to_verbs_vocabulary() {
        assert!(wc_status(Status::OK).is_success());
        assert_eq!(
            wc_status(Status::MESSAGE_TRUNCATED).name(),
            "IBV_WC_LOC_LEN_ERR"
        );
        assert_eq!(wc_status(Status::CANCELED), WcStatus::WR_FLUSH_ERR);
        assert_eq!(
            wc_status(Status::ENDPOINT_TIMEOUT).name(),
            "IBV_WC_RETRY_EXC_ERR"
        );
        assert_eq!(
            wc_status(Status::CONNECTION_RESET).name(),
            "IBV_WC_RETRY_EXC_ERR"
        );
        assert_eq!(wc_status(REMOTE_ACCESS).name(), "IBV_WC_REM_ACCESS_ERR");
        assert_eq!(vendor_err(Status::CANCELED) as i32, -16);
        assert_eq!(Status::CANCELED.to_string(), "-16");
    }
}
