//! The outcome of an `*_nbx` call that finished inside the call: no
//! callback reports it, so it is recorded as the event the callback would
//! have (the request parameters every call shares are `crate::ucp`'s).

use crate::ucp::events::{self, Event};
use crate::ucp::{Started, Status};

/// Records the outcome of an `*_nbx` call that completed or failed inside
/// the call (no callback runs for those).
pub(crate) fn record(token: u64, s: Started) -> Started {
    match s {
        Started::Done => events::push(Event::new(token, Status::OK)),
        Started::Failed(st) => events::push(Event::new(token, st)),
        Started::Pending(_) => {}
    }
    s
}
