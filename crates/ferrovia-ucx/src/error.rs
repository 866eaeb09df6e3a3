//! The UCX layer's error type.

use std::ffi::CStr;

use crate::ffi;

/// A UCX call failed, or an operation did not finish in time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UcxError {
    /// A UCX function returned an error status.
    #[error("{op} failed: {message} (ucs_status_t {status})")]
    Status {
        /// The UCX function.
        op: &'static str,
        /// The status code.
        status: i8,
        /// UCX's own description.
        message: String,
    },
    /// A configuration option name or value contains a NUL byte.
    #[error("UCX option {name:?} is not a valid C string")]
    InvalidOption {
        /// The option.
        name: String,
    },
}

fn status_error(op: &'static str, status: ffi::ucs_status_t) -> UcxError {
    // SAFETY: ucs_status_string returns a static NUL-terminated string for
    // any status value.
    let message = unsafe { CStr::from_ptr(ffi::ucs_status_string(status)) }
        .to_string_lossy()
        .into_owned();
    UcxError::Status {
        op,
        status,
        message,
    }
}

pub(crate) fn check(op: &'static str, status: ffi::ucs_status_t) -> Result<(), UcxError> {
    if status == ffi::UCS_OK as ffi::ucs_status_t {
        Ok(())
    } else {
        Err(status_error(op, status))
    }
}
