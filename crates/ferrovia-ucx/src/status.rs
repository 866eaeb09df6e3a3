//! UCX status values: the `UCS_PTR_*` macros rewritten in Rust, and how a
//! UCX status reads in the verbs completion vocabulary the core speaks.

use std::ffi::c_void;

use ferrovia_types::WcStatus;

use crate::ffi;

/// What a `ucs_status_ptr_t` returned by an `*_nbx` call means.
pub(crate) enum Started {
    /// Completed inside the call; no callback will run.
    Done,
    /// In flight; its callback will run (and free it).
    Pending(*mut c_void),
    /// Failed inside the call; no callback will run.
    Failed(ffi::ucs_status_t),
}

/// `UCS_PTR_IS_PTR` / `UCS_PTR_IS_ERR` / `UCS_PTR_STATUS`.
pub(crate) fn started(p: ffi::ucs_status_ptr_t) -> Started {
    let v = p as isize;
    if p.is_null() {
        Started::Done
    } else if (ffi::UCS_ERR_LAST as isize..0).contains(&v) {
        Started::Failed(v as ffi::ucs_status_t)
    } else {
        Started::Pending(p)
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
pub(crate) fn wc_status(status: ffi::ucs_status_t) -> WcStatus {
    WcStatus(match status {
        ffi::UCS_OK => 0,
        ffi::UCS_ERR_MESSAGE_TRUNCATED => LOC_LEN_ERR,
        ffi::UCS_ERR_CANCELED => WR_FLUSH_ERR,
        REMOTE_ACCESS => REM_ACCESS_ERR,
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
pub(crate) const REMOTE_ACCESS: ffi::ucs_status_t = ffi::UCS_ERR_NO_ELEM;

/// The vendor-error form of a status (its two's-complement bits).
pub(crate) fn vendor_err(status: ffi::ucs_status_t) -> u32 {
    i32::from(status) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_pointers_decode_like_the_macros() {
        assert!(matches!(started(std::ptr::null_mut()), Started::Done));
        let err = ffi::UCS_ERR_CANCELED as isize as ffi::ucs_status_ptr_t;
        assert!(matches!(
            started(err),
            Started::Failed(ffi::UCS_ERR_CANCELED)
        ));
        let mut x = 0u8;
        let p = (&raw mut x).cast::<c_void>();
        assert!(matches!(started(p), Started::Pending(q) if q == p));
    }

    #[test]
    fn statuses_map_to_verbs_vocabulary() {
        assert!(wc_status(ffi::UCS_OK).is_success());
        assert_eq!(
            wc_status(ffi::UCS_ERR_MESSAGE_TRUNCATED).name(),
            "IBV_WC_LOC_LEN_ERR"
        );
        assert_eq!(wc_status(ffi::UCS_ERR_CANCELED), WcStatus::WR_FLUSH_ERR);
        assert_eq!(
            wc_status(ffi::UCS_ERR_ENDPOINT_TIMEOUT).name(),
            "IBV_WC_RETRY_EXC_ERR"
        );
        assert_eq!(
            wc_status(ffi::UCS_ERR_CONNECTION_RESET).name(),
            "IBV_WC_RETRY_EXC_ERR"
        );
        assert_eq!(wc_status(REMOTE_ACCESS).name(), "IBV_WC_REM_ACCESS_ERR");
        assert_eq!(vendor_err(ffi::UCS_ERR_CANCELED) as i32, -16);
    }
}
