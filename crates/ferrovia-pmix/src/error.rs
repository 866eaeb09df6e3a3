//! What can go wrong talking to PMIx: each variant names the call.

use std::time::Duration;

/// A PMIx failure, naming the call and PMIx's status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PmixError {
    /// libpmix could not be loaded.
    #[error(
        "cannot load {library}: {reason} (install libpmix2, or name the library in FERROVIA_LIBPMIX)"
    )]
    Load {
        /// The file asked for.
        library: String,
        /// What the loader said.
        reason: String,
    },
    /// A call returned an error status.
    #[error("{call} failed: {text} (PMIx status {status})")]
    Call {
        /// The PMIx function.
        call: &'static str,
        /// Its status.
        status: i32,
        /// `PMIx_Error_string` of it.
        text: String,
    },
    /// A call did not complete by its deadline (a fence some rank never
    /// entered, above all). The call stays outstanding inside PMIx.
    #[error("{call} did not complete within {after:?}")]
    TimedOut {
        /// The PMIx function.
        call: &'static str,
        /// How long it was given.
        after: Duration,
    },
    /// A key PMIx cannot take (too long, or holding a NUL byte).
    #[error("PMIx key {key:?} is invalid: {reason}")]
    BadKey {
        /// The key.
        key: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A value came back of another type than asked for.
    #[error("PMIx value {key:?} of rank {rank} has type {found}, expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// Whose value.
        rank: u32,
        /// The PMIx data type found.
        found: u16,
        /// What was expected.
        expected: &'static str,
    },
}
