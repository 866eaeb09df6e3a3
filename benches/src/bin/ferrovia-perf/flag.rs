//! The arrival flag of the write-latency ping-pongs: the last byte of each
//! side's inbox, which the peer's write of round `i` sets to
//! [`fill(i)`](fill), alternating 0xff and 0x00.
//!
//! The receiver never clears it. A remote write may store its bytes more
//! than once: a `memcpy` of 8 bytes writes the same word twice (glibc
//! copies 8 to 15 bytes as two overlapping words), and UCX's shared-memory
//! put and ferrovia's mapped path are such copies. A flag cleared between
//! those two stores came back, the receiver took it for the next round,
//! answered early, and the peer's next write then landed on a flag not yet
//! cleared: both sides waited for ever (one run in five under load). With
//! alternating values a repeated store writes what is already there, and
//! round `i + 2`'s write cannot come before round `i + 1`'s was seen.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Acquire;

/// What round `round`'s write leaves in the flag byte (the inbox starts
/// zeroed).
pub(crate) fn fill(round: usize) -> u8 {
    if round.is_multiple_of(2) { 0xff } else { 0x00 }
}

/// The flag byte `last` of the word `flag`, as round `round` awaits it.
pub(crate) struct Flag<'a> {
    pub(crate) word: &'a AtomicU64,
    pub(crate) last: usize,
}

impl Flag<'_> {
    /// The flag of an inbox of `size` bytes, given its words.
    pub(crate) fn of(words: &[AtomicU64], size: usize) -> Flag<'_> {
        Flag {
            word: &words[(size - 1) / 8],
            last: (size - 1) % 8,
        }
    }

    /// The flag byte now.
    pub(crate) fn byte(&self) -> u8 {
        self.word.load(Acquire).to_ne_bytes()[self.last]
    }

    /// Whether round `round`'s write has landed.
    pub(crate) fn landed(&self, round: usize) -> bool {
        self.byte() == fill(round)
    }

    /// The error of a wait for round `round` that ran out of time.
    pub(crate) fn never_arrived(&self, round: usize) -> String {
        format!(
            "write_lat: the peer's write of round {round} never arrived (flag byte {:#04x}, waiting for {:#04x})",
            self.byte(),
            fill(round)
        )
    }
}
