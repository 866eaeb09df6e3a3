//! The transport's event fd ([`Transport::event_fd`]): an `eventfd` the
//! engine signals when it delivers a completion while someone is armed.
//!
//! The worker's own event fd (`ucp_worker_get_efd`) belongs to the
//! progress thread, which sleeps on it and turns the engine; completions
//! reach `Transport::poll` only after such a turn. So an event loop does
//! not watch the worker's fd but this one, which the engine signals after
//! the turn that produced a completion: the kernel wakes the progress
//! thread, which wakes the event loop. Signalling costs an atomic load
//! unless an event loop armed it. While armed, the progress thread does not
//! stand back for user turns: the event loop's last poll before it sleeps
//! takes one, and standing back then would leave nobody progressing.
//!
//! [`Transport::event_fd`]: ferrovia_channel::transport::Transport::event_fd

use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, fence};

/// An eventfd and whether a waiter armed it.
pub(crate) struct Notifier {
    /// `None` if the kernel refused an eventfd (no event fd then).
    fd: Option<OwnedFd>,
    armed: AtomicBool,
}

impl Notifier {
    pub(crate) fn new() -> Notifier {
        // SAFETY: eventfd takes no pointer; it returns a new descriptor or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        let fd = if raw < 0 {
            tracing::warn!(
                "eventfd failed ({}): UCX transport without an event fd",
                std::io::Error::last_os_error()
            );
            None
        } else {
            // SAFETY: `raw` is a descriptor eventfd just opened, owned by
            // nothing else.
            Some(unsafe { OwnedFd::from_raw_fd(raw) })
        };
        Notifier {
            fd,
            armed: AtomicBool::new(false),
        }
    }

    pub(crate) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(AsFd::as_fd)
    }

    /// The next delivered completion signals the fd.
    pub(crate) fn arm(&self) {
        self.armed.store(true, SeqCst);
        // Pairs with the fence in `signal`: either the deliverer sees the
        // arm, or the waiter's poll after arming sees the completion.
        fence(SeqCst);
    }

    /// Whether an event loop armed the fd and waits for a delivery: the
    /// progress thread then does not stand back for user turns (the
    /// waiter's last poll before sleeping took one).
    pub(crate) fn armed(&self) -> bool {
        self.armed.load(Relaxed)
    }

    /// A completion was delivered: signal the fd if armed (once per arm).
    pub(crate) fn signal(&self) {
        fence(SeqCst);
        if !self.armed.load(Relaxed) || !self.armed.swap(false, SeqCst) {
            return;
        }
        if let Some(fd) = &self.fd {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writes 8 bytes from a live local buffer to our open
            // eventfd; a full counter (EAGAIN) already means "readable".
            unsafe { libc::write(std::os::fd::AsRawFd::as_raw_fd(fd), one.as_ptr().cast(), 8) };
        }
    }

    /// Consumes the fd's readiness (non-blocking).
    pub(crate) fn ack(&self) {
        if let Some(fd) = &self.fd {
            let mut buf = [0u8; 8];
            // SAFETY: reads at most 8 bytes into a live local buffer from
            // our open, non-blocking eventfd (EAGAIN when not signalled).
            unsafe {
                libc::read(
                    std::os::fd::AsRawFd::as_raw_fd(fd),
                    buf.as_mut_ptr().cast(),
                    8,
                )
            };
        }
    }
}
