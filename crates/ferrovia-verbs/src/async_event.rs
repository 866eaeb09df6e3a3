//! A device's asynchronous events (`ibv_get_async_event`), read with a
//! deadline: port changes, QP and CQ errors, SRQ low watermarks.

use std::time::Duration;

use ferrovia_sys as sys;

use crate::context::Context;
use crate::error::{Result, VerbsError, last_errno, lib};

/// One asynchronous event of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// A shared receive queue fell below its armed limit (the raw SRQ,
    /// compare with [`SharedReceiveQueue::as_raw`](crate::SharedReceiveQueue::as_raw)).
    SrqLimitReached {
        /// The SRQ's address, as an identifier.
        srq: usize,
    },
    /// A QP hit a fatal error (it is in the error state).
    QpFatal {
        /// Its QP number.
        qp_num: u32,
    },
    /// A QP attached to a shared receive queue, now in the error state,
    /// will take no more receives from it.
    LastWqeReached {
        /// Its QP number.
        qp_num: u32,
    },
    /// A port became active or went down.
    Port {
        /// The port number.
        port: u8,
        /// Whether it is active now.
        active: bool,
    },
    /// Another event, by its `enum ibv_event_type` code.
    Other(u32),
}

impl Context {
    /// The next asynchronous event of the device, waiting up to `timeout`;
    /// `Ok(None)` if none came. Acknowledged before it is returned.
    pub fn next_async_event(&self, timeout: Duration) -> Result<Option<AsyncEvent>> {
        // SAFETY: the context is live; `async_fd` is a plain field.
        let fd = unsafe { (*self.as_raw()).async_fd };
        // Non-blocking, so a readiness another thread consumed first returns
        // EAGAIN instead of sleeping past the deadline.
        // SAFETY: fcntl on the context's open descriptor with integer
        // arguments; it changes only its blocking mode.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(VerbsError::Verb {
                verb: "fcntl(O_NONBLOCK) on the async event fd",
                errno: last_errno().unwrap_or(libc::EIO),
            });
        }
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut p, 1, ms) };
        if ready <= 0 {
            return Ok(None);
        }
        let mut ev = sys::ibv_async_event::default();
        // SAFETY: a live context and an out-pointer; the fd is non-blocking.
        let got = unsafe { lib()?.ibv_get_async_event(self.as_raw(), &mut ev) };
        if got != 0 {
            return match last_errno() {
                Some(libc::EAGAIN) | None => Ok(None),
                Some(errno) => Err(VerbsError::Verb {
                    verb: "ibv_get_async_event",
                    errno,
                }),
            };
        }
        use sys::ibv_event_type as E;
        let kind = ev.event_type;
        // SAFETY: the union member that `event_type` says is set; the
        // pointers are only read as identifiers or, for a QP, for its
        // number while the event is not yet acknowledged (the QP cannot be
        // destroyed before that).
        let out = unsafe {
            match kind {
                E::IBV_EVENT_SRQ_LIMIT_REACHED => AsyncEvent::SrqLimitReached {
                    srq: ev.element.srq as usize,
                },
                E::IBV_EVENT_QP_FATAL | E::IBV_EVENT_QP_REQ_ERR | E::IBV_EVENT_QP_ACCESS_ERR => {
                    AsyncEvent::QpFatal {
                        qp_num: ev.element.qp.as_ref().map_or(0, |qp| qp.qp_num),
                    }
                }
                E::IBV_EVENT_QP_LAST_WQE_REACHED => AsyncEvent::LastWqeReached {
                    qp_num: ev.element.qp.as_ref().map_or(0, |qp| qp.qp_num),
                },
                E::IBV_EVENT_PORT_ACTIVE | E::IBV_EVENT_PORT_ERR => AsyncEvent::Port {
                    port: u8::try_from(ev.element.port_num).unwrap_or(0),
                    active: kind == E::IBV_EVENT_PORT_ACTIVE,
                },
                other => AsyncEvent::Other(other.0),
            }
        };
        // SAFETY: the event was returned by ibv_get_async_event and is
        // acknowledged once.
        unsafe { lib()?.ibv_ack_async_event(&mut ev) };
        Ok(Some(out))
    }
}
