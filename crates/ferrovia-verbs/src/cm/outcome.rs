//! Waiting for the outcome of one handshake step on an id's channel: the
//! event the step expects, or the typed error the other events mean.

use std::net::SocketAddr;
use std::time::Instant;

use crate::cm::error::{CmError, CmResult, RejectReason};
use crate::cm::event::{CmEvent, CmEventType};
use crate::cm::id::CmId;

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
        let mut ev = id.channel().next(deadline, what, addr)?.event;
        let kind = ev.event_type();
        if kind == want && (ev.status() == 0 || kind == CmEventType::CONNECT_REQUEST) {
            return Ok(ev);
        }
        let status = ev.status();
        let errno = if status < 0 { -status } else { libc::EIO };
        return Err(match kind {
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
                log::debug!("{what} for {addr}: skipping {kind}");
                continue;
            }
            _ => CmError::UnexpectedEvent {
                what,
                addr,
                event: kind,
                status,
            },
        });
    }
}

/// What is left of `deadline` in whole milliseconds for a librdmacm
/// timeout argument: at least 1, at most `i32::MAX`.
pub(crate) fn millis_left(deadline: Instant) -> i32 {
    let left = deadline.saturating_duration_since(Instant::now());
    i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1)
}
