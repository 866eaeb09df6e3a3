//! What a request's `user_data` names: a token of class, peer and index,
//! so a callback needs no pointer into the engine. (The request
//! parameters that carry one are `crate::ucp`'s.)
//!
//! ```text
//! 63..56  class     55..32  peer     31..0  sequence number, slot or id
//! ```

/// A part (put, get or message) of a send-queue op; index: its sequence
/// number.
pub(crate) const PART: u64 = 1;
/// An endpoint flush covering writes up to the sequence number.
pub(crate) const FLUSH: u64 = 2;
/// A receive; index: its slot.
pub(crate) const RECV: u64 = 3;
/// The notification of a write with immediate; index: its sequence number.
pub(crate) const NOTIFY: u64 = 4;
/// A control message; index: its id.
pub(crate) const CTRL: u64 = 5;
/// An endpoint close.
pub(crate) const CLOSE: u64 = 6;
/// An endpoint failed.
pub(crate) const EP_ERROR: u64 = 7;
/// The flush before acknowledging a revocation; index: its id.
pub(crate) const REVOKE_FLUSH: u64 = 9;
/// The flush before a goodbye.
pub(crate) const GOODBYE_FLUSH: u64 = 10;
/// A control message arrived.
pub(crate) const CONTROL_TOKEN: u64 = 8 << 56;
/// The most peers a token can name.
pub(crate) const MAX_PEERS: usize = 1 << 24;

pub(crate) fn token(class: u64, peer: usize, index: u32) -> u64 {
    class << 56 | (peer as u64) << 32 | u64::from(index)
}

/// Class, peer and index of a token.
pub(crate) fn split(token: u64) -> (u64, usize, u32) {
    (
        token >> 56,
        ((token >> 32) & 0xff_ffff) as usize,
        token as u32,
    )
}

/// The token an error of `peer`'s endpoint of `generation` reports (the
/// endpoint's error handler carries it).
pub(crate) fn ep_error(peer: usize, generation: u32) -> u64 {
    token(EP_ERROR, peer, generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        let t = token(NOTIFY, MAX_PEERS - 1, u32::MAX);
        assert_eq!(split(t), (NOTIFY, MAX_PEERS - 1, u32::MAX));
        assert_eq!(split(ep_error(3, 0)), (EP_ERROR, 3, 0));
        assert_eq!(split(ep_error(5, 2)), (EP_ERROR, 5, 2));
        assert_eq!(split(CONTROL_TOKEN).0, 8);
    }
}
