//! The error type of every subcommand: a message for the user plus the exit
//! status xtask should end with.

use std::fmt;

/// Exit status for "the VM or its setup failed" (as `timeout(1)` and the
/// reference script use it: distinct from any status of the guest command).
pub(crate) const STATUS_VM_FAILURE: u8 = 125;
/// Exit status for "the overall timeout expired" (as `timeout(1)`).
pub(crate) const STATUS_TIMEOUT: u8 = 124;

/// A failed subcommand: what went wrong, and the exit status to report.
#[derive(Debug)]
pub(crate) struct Failure {
    message: String,
    status: u8,
    /// The message has been printed already (`main` only sets the status).
    reported: bool,
}

impl Failure {
    /// A plain failure (exit status 1).
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self::with_status(message, 1)
    }

    /// A failure with a specific exit status.
    pub(crate) fn with_status(message: impl Into<String>, status: u8) -> Self {
        Self {
            message: message.into(),
            status,
            reported: false,
        }
    }

    /// The same failure, marked as printed: `main` exits with its status
    /// without printing the message again (used when the message must come
    /// before the closing lines of `cargo xtask test`).
    pub(crate) fn reported(self) -> Self {
        Self {
            reported: true,
            ..self
        }
    }

    /// Whether the message has been printed already.
    pub(crate) fn is_reported(&self) -> bool {
        self.reported
    }

    /// The exit status xtask should end with.
    pub(crate) fn status(&self) -> u8 {
        self.status
    }

    /// Prefixes the message with what was being done.
    pub(crate) fn context(self, what: impl fmt::Display) -> Self {
        Self {
            message: format!("{what}: {}", self.message),
            ..self
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Shorthand for subcommand results.
pub(crate) type Result<T> = std::result::Result<T, Failure>;

/// Turns an I/O error into a failure that names the operation and path.
pub(crate) fn io_failure(what: impl fmt::Display, err: std::io::Error) -> Failure {
    Failure::new(format!("{what}: {err}"))
}
