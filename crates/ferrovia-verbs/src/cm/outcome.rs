//! Waiting for the outcome of one handshake step on an id's channel: the
//! event the step expects, or the typed error the other events mean.

use std::net::SocketAddr;
use std::time::Instant;

use crate::cm::error::{CmError, CmResult};
use crate::cm::event::{CmEvent, CmEventType};
use crate::cm::id::CmId;
use crate::cm::reject_reason::RejectReason;

/// Waits until `deadline` for `want` on `id`'s channel. Failure events
/// become their errors; events that say nothing about the step in
/// progress (an address change, a time-wait exit) are skipped.
pub(crate) fn expect(
    id: &CmId,
    want: CmEventType,
    deadline: Instant,
    what: &'static str,
    addr: SocketAddr,
) -> CmResult<CmEvent> {
    loop {
        let ev = id.channel().next(deadline, what, addr)?.event;
        let kind = ev.event_type();
        if kind == want && ev.status() == 0 {
            return Ok(ev);
        }
        if let Some(e) = failure(ev, what, addr) {
            return Err(e);
        }
    }
}

/// Explains a call that failed during a handshake: if the peer's failure
/// is already waiting on the id's channel (a rejection, say), that is the
/// error. Else, on the accepting side (`request`), a connection manager
/// call refused with EINVAL means the request is gone: the kernel drops
/// the events of a request not yet accepted, so a client that gave up
/// shows only as this.
pub(crate) fn explain(id: &CmId, addr: SocketAddr, err: CmError, request: bool) -> CmError {
    if !matches!(err, CmError::Call { .. } | CmError::Verbs { .. }) {
        return err;
    }
    if let Ok(Some(raw)) = id.channel().try_next(addr)
        && let Some(e) = failure(raw.event, "a failed handshake step", addr)
    {
        return e;
    }
    match err {
        CmError::Call {
            call: call @ ("rdma_init_qp_attr" | "rdma_accept"),
            addr,
            errno: errno @ libc::EINVAL,
        } if request => CmError::RequestWithdrawn { addr, call, errno },
        err => err,
    }
}

/// The error a failure event means; `None` for events that say nothing
/// about a handshake (an address change, a time-wait exit).
fn failure(mut ev: CmEvent, what: &'static str, addr: SocketAddr) -> Option<CmError> {
    let kind = ev.event_type();
    let status = ev.status();
    let errno = if status < 0 { -status } else { libc::EIO };
    Some(match kind {
        CmEventType::REJECTED if RejectReason(status) == RejectReason::INVALID_SERVICE_ID => {
            CmError::NotListening { addr }
        }
        CmEventType::REJECTED => CmError::Rejected {
            addr,
            reason: RejectReason(status),
            private_data: ev.take_private_data(),
        },
        CmEventType::UNREACHABLE => CmError::Unreachable { addr, status },
        CmEventType::CONNECT_ERROR => CmError::ConnectError { addr, status },
        CmEventType::ADDR_ERROR => CmError::AddressResolution { addr, errno },
        CmEventType::ROUTE_ERROR => CmError::RouteResolution { addr, errno },
        CmEventType::DISCONNECTED => CmError::Disconnected { addr },
        CmEventType::DEVICE_REMOVAL => CmError::DeviceRemoved { addr },
        CmEventType::ADDR_CHANGE | CmEventType::TIMEWAIT_EXIT => {
            tracing::debug!("{what} for {addr}: skipping {kind}");
            return None;
        }
        _ => CmError::UnexpectedEvent {
            what,
            addr,
            event: kind,
            status,
        },
    })
}

/// What is left of `deadline` in whole milliseconds for a librdmacm
/// timeout argument: at least 1, at most `i32::MAX`.
pub(crate) fn millis_left(deadline: Instant) -> i32 {
    let left = deadline.saturating_duration_since(Instant::now());
    i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1)
}
