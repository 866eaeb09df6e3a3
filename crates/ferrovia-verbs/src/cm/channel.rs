//! An event channel (`struct rdma_event_channel`) read with deadlines.
//!
//! Its fd is made non-blocking at creation, so `rdma_get_cm_event` never
//! sleeps: a wait polls the fd with the time left, then reads. Every event
//! read is copied and acknowledged at once (`rdma_destroy_id` blocks until
//! its events are acknowledged, so none is ever held).

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::{NonNull, null_mut};
use std::sync::{Mutex, PoisonError, TryLockError};
use std::time::Instant;

use ferrovia_sys as sys;

use crate::cm::error::{CmError, CmResult, call_error, cm_lib, cm_loaded};
use crate::cm::event::{CmEvent, CmEventType, ConnOffer};
use crate::error::last_errno;

/// One event channel; every id on it keeps it alive (an `Arc`).
pub(crate) struct EventChannel {
    raw: NonNull<sys::rdma_event_channel>,
    /// One reader at a time: an event read by one waiter is its own.
    reading: Mutex<()>,
}

// SAFETY: the channel is an fd in a heap struct librdmacm never moves;
// reads are serialised by `reading`, and librdmacm's calls on a channel
// are thread-safe (each event is its own allocation).
unsafe impl Send for EventChannel {}
// SAFETY: as above.
unsafe impl Sync for EventChannel {}

impl Drop for EventChannel {
    fn drop(&mut self) {
        if let Some(l) = cm_loaded() {
            // SAFETY: every id on this channel holds an Arc of it, so none
            // is left; the channel is destroyed once, here.
            unsafe { l.rdma_destroy_event_channel(self.raw.as_ptr()) };
        }
    }
}

/// An event read from a channel, before it is handed to its id's owner:
/// the id it is for (for a connect request, the new id), and its copy.
pub(crate) struct RawEvent {
    pub(crate) id: *mut sys::rdma_cm_id,
    pub(crate) event: CmEvent,
}

impl EventChannel {
    /// Creates a channel whose fd is non-blocking. `addr` names what it is
    /// for in errors.
    pub(crate) fn new(addr: SocketAddr) -> CmResult<EventChannel> {
        let lib = cm_lib()?;
        // SAFETY: no arguments; returns a new channel or NULL with errno.
        let raw = unsafe { lib.rdma_create_event_channel() };
        let raw = NonNull::new(raw).ok_or_else(|| call_error("rdma_create_event_channel", addr))?;
        let channel = EventChannel {
            raw,
            reading: Mutex::new(()),
        };
        let fd = channel.as_raw_fd();
        // SAFETY: `fd` is the channel's open descriptor; F_GETFL takes no
        // pointer and changes nothing.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: F_SETFL with an integer flag set on the same descriptor;
        // it only makes its reads non-blocking.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(CmError::Call {
                call: "fcntl(O_NONBLOCK) on the event channel",
                addr,
                errno: last_errno().unwrap_or(libc::EIO),
            });
        }
        Ok(channel)
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::rdma_event_channel {
        self.raw.as_ptr()
    }

    /// Reads one event if one is pending; never blocks (if another thread
    /// is waiting on the channel, the next event is that thread's).
    pub(crate) fn try_next(&self, addr: SocketAddr) -> CmResult<Option<RawEvent>> {
        let _one_reader = match self.reading.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(None),
        };
        self.read_one(addr)
    }

    /// Waits until `deadline` for one event. `what` and `addr` name the
    /// wait in a timeout error.
    pub(crate) fn next(
        &self,
        deadline: Instant,
        what: &'static str,
        addr: SocketAddr,
    ) -> CmResult<RawEvent> {
        let started = Instant::now();
        let _one_reader = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(ev) = self.read_one(addr)? {
                return Ok(ev);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(CmError::Timeout {
                    what,
                    addr,
                    after: now - started,
                });
            }
            self.poll(deadline - now, addr)?;
        }
    }

    /// Sleeps until the fd is readable or `left` has passed.
    fn poll(&self, left: std::time::Duration, addr: SocketAddr) -> CmResult<()> {
        let mut pfd = libc::pollfd {
            fd: self.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Round up so a wait never ends just before its deadline and spins.
        let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 && last_errno() != Some(libc::EINTR) {
            return Err(CmError::Call {
                call: "poll(event channel)",
                addr,
                errno: last_errno().unwrap_or(libc::EIO),
            });
        }
        Ok(())
    }

    /// One `rdma_get_cm_event`: `None` when nothing is pending (EAGAIN on
    /// the non-blocking fd). The caller holds `reading`.
    fn read_one(&self, addr: SocketAddr) -> CmResult<Option<RawEvent>> {
        let lib = cm_lib()?;
        let mut raw: *mut sys::rdma_cm_event = null_mut();
        // SAFETY: a live channel and an out-pointer; the fd is non-blocking,
        // so this returns -1/EAGAIN instead of sleeping.
        let ret = unsafe { lib.rdma_get_cm_event(self.as_ptr(), &mut raw) };
        if ret != 0 {
            return match last_errno() {
                Some(libc::EAGAIN | libc::EINTR) => Ok(None),
                _ => Err(call_error("rdma_get_cm_event", addr)),
            };
        }
        let Some(raw) = NonNull::new(raw) else {
            return Err(CmError::Call {
                call: "rdma_get_cm_event (no event)",
                addr,
                errno: libc::EIO,
            });
        };
        // SAFETY: librdmacm returned this event and it stays valid until
        // acknowledged, just below.
        let copied = unsafe { copy_event(raw.as_ref()) };
        // SAFETY: the event was returned by rdma_get_cm_event and is
        // acknowledged exactly once; nothing points into it afterwards
        // (its private data was copied).
        unsafe { lib.rdma_ack_cm_event(raw.as_ptr()) };
        Ok(Some(copied))
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: `raw` points to the live channel struct; `fd` is a plain
        // int librdmacm set at creation and never changes.
        unsafe { self.raw.as_ref().fd }
    }
}

/// Copies what ferrovia keeps of an event.
///
/// # Safety
/// `ev` must be an event returned by `rdma_get_cm_event` and not yet
/// acknowledged.
unsafe fn copy_event(ev: &sys::rdma_cm_event) -> RawEvent {
    let kind = CmEventType(ev.event.0);
    let mut private_data = Vec::new();
    let mut offer = ConnOffer::default();
    if kind.carries_conn_param() {
        // SAFETY: for these event types the library fills `param.conn`
        // (rdma_get_cm_event(3)); reading the union's `conn` member is
        // then reading initialised plain data.
        let conn = unsafe { ev.param.conn };
        if !conn.private_data.is_null() && conn.private_data_len > 0 {
            // SAFETY: the library guarantees `private_data_len` readable
            // bytes at `private_data` until the event is acknowledged,
            // which our caller has not done yet.
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
            };
            private_data = bytes.to_vec();
        }
        offer = ConnOffer {
            responder_resources: conn.responder_resources,
            initiator_depth: conn.initiator_depth,
            qp_num: conn.qp_num,
        };
    }
    RawEvent {
        id: ev.id,
        event: CmEvent::new(kind, ev.status, private_data, offer),
    }
}
