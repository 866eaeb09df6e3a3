//! The verbs layer's error type.

use std::io;

use ferrovia_types::CompletionError;

/// Result alias of the verbs layer.
pub type Result<T, E = VerbsError> = std::result::Result<T, E>;

/// Everything that can go wrong in `ferrovia-verbs`.
///
/// Each variant says which verb failed and with what errno, or which work
/// request completed with which status.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// A libibverbs call failed.
    #[error("{verb} failed: {} (errno {errno})", io::Error::from_raw_os_error(*errno))]
    Verb {
        /// The verb that failed, e.g. `"ibv_modify_qp(RTR)"`.
        verb: &'static str,
        /// The errno it reported.
        errno: i32,
    },
    /// Posting a work request failed; nothing from `bad_wr_id` on was posted.
    #[error("{verb} failed at wr_id {bad_wr_id}: {} (errno {errno})", io::Error::from_raw_os_error(*errno))]
    Post {
        /// `"ibv_post_send"` or `"ibv_post_recv"`.
        verb: &'static str,
        /// The errno it returned.
        errno: i32,
        /// The first work request that was not posted.
        bad_wr_id: u64,
    },
    /// No device with that name exists.
    #[error("no RDMA device named {name:?} (devices present: {present:?})")]
    NoSuchDevice {
        /// The name asked for.
        name: String,
        /// The names that do exist.
        present: Vec<String>,
    },
    /// There is no RDMA device at all on this host.
    #[error(
        "no RDMA device found on this host (soft-RoCE: `cargo xtask softroce`, or run inside `cargo xtask vm`)"
    )]
    NoDevice,
    /// The port has no GID usable for connecting.
    #[error("port {port} of {device} has no usable GID (is the netdev up and addressed?)")]
    NoUsableGid {
        /// Device name.
        device: String,
        /// Port number.
        port: u8,
    },
    /// The device does not offer a feature: checked against its
    /// capabilities before anything was created, or refused by its
    /// provider (then nothing was created either).
    #[error("{device} does not offer {what}: {detail}")]
    Unsupported {
        /// The device name.
        device: String,
        /// The feature, e.g. `"completion timestamps"`.
        what: &'static str,
        /// The capability bit that is missing, or the verb and errno that
        /// refused.
        detail: String,
    },
    /// An argument was out of range for the device or the verb.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A wait reached its deadline.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// What was being waited for.
        what: &'static str,
        /// How long the wait lasted.
        after: std::time::Duration,
    },
    /// A work request completed with an error status.
    #[error(transparent)]
    Completion(#[from] CompletionError),
    /// libibverbs could not be loaded (not installed on this host).
    #[error(transparent)]
    Unavailable(#[from] ferrovia_sys::LoadError),
}

/// libibverbs, loaded on first use; an error says it is not installed.
pub(crate) fn lib() -> Result<&'static ferrovia_sys::Verbs> {
    Ok(ferrovia_sys::verbs()?)
}

/// libibverbs from a destructor: an object that exists was made by a
/// loaded library, so this only yields `None` if that invariant broke (and
/// then there is nothing to free).
pub(crate) fn loaded() -> Option<&'static ferrovia_sys::Verbs> {
    ferrovia_sys::verbs().ok()
}

/// Turns a libibverbs return code into a `Result`.
///
/// Most verbs return 0 or a positive errno; a few return -1 and set errno.
pub(crate) fn check(verb: &'static str, ret: i32) -> Result<()> {
    match ret {
        0 => Ok(()),
        r if r > 0 => Err(VerbsError::Verb { verb, errno: r }),
        r => Err(VerbsError::Verb {
            verb,
            errno: last_errno().unwrap_or(-r),
        }),
    }
}

/// The calling thread's errno, if set.
pub(crate) fn last_errno() -> Option<i32> {
    io::Error::last_os_error()
        .raw_os_error()
        .filter(|&e| e != 0)
}

/// Error for a verb that returned NULL.
pub(crate) fn null_error(verb: &'static str) -> VerbsError {
    VerbsError::Verb {
        verb,
        errno: last_errno().unwrap_or(libc::EIO),
    }
}

/// The outcome of a post verb that returned `ret`: on failure, the error
/// names the first request not posted (where the provider stopped, from
/// `stopped`, else the list's first).
pub(crate) fn posted(
    verb: &'static str,
    ret: i32,
    first_wr_id: u64,
    stopped: impl FnOnce() -> Option<u64>,
) -> Result<()> {
    if ret == 0 {
        return Ok(());
    }
    Err(VerbsError::Post {
        verb,
        errno: ret,
        bad_wr_id: stopped().unwrap_or(first_wr_id),
    })
}
