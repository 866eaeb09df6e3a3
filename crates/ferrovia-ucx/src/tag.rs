//! How two-sided messages are tagged: the sender's index and the
//! immediate travel in the 64-bit UCX tag, so a receive posted for a peer
//! matches only that peer's messages, in order.
//!
//! ```text
//! 63..62  zero (reserved)     61  has immediate     60  write-with-immediate
//! 59..32  sender index        31..0  immediate
//! ```

/// Set when the message carries an immediate.
pub(crate) const HAS_IMM: u64 = 1 << 61;
/// Set on the notification that ends a write with immediate.
pub(crate) const WRITE_IMM: u64 = 1 << 60;
const SENDER_BITS: u64 = 28;
/// The most peers a transport can address.
pub(crate) const MAX_PEERS: usize = 1 << SENDER_BITS;
const SENDER_MASK: u64 = ((1 << SENDER_BITS) - 1) << 32;
const RESERVED: u64 = 0b11 << 62;

/// The tag of a message from `sender`.
pub(crate) fn send_tag(sender: usize, imm: Option<u32>, write: bool) -> u64 {
    let mut t = (sender as u64) << 32;
    if let Some(imm) = imm {
        t |= HAS_IMM | u64::from(imm);
    }
    if write {
        t |= WRITE_IMM;
    }
    t
}

/// Tag and mask of a receive for messages from `sender`.
pub(crate) fn recv_match(sender: usize) -> (u64, u64) {
    ((sender as u64) << 32, SENDER_MASK | RESERVED)
}

/// The immediate a received tag carries.
pub(crate) fn imm_of(tag: u64) -> Option<u32> {
    (tag & HAS_IMM != 0).then_some(tag as u32)
}

/// Whether the received message is a write-with-immediate notification.
pub(crate) fn is_write_imm(tag: u64) -> bool {
    tag & WRITE_IMM != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_matches_only_its_sender() {
        let (tag, mask) = recv_match(5);
        for (sender, imm, write) in [
            (5, None, false),
            (5, Some(u32::MAX), true),
            (5, Some(0), false),
        ] {
            let t = send_tag(sender, imm, write);
            assert_eq!(t & mask, tag & mask);
            assert_eq!(imm_of(t), imm);
            assert_eq!(is_write_imm(t), write);
        }
        for other in [4, 6, MAX_PEERS - 1] {
            assert_ne!(send_tag(other, Some(7), false) & mask, tag);
        }
    }
}
