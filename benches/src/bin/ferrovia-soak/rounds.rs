//! What one round of the soak does, as rank 0 draws it and tells the
//! others: a small header sent to every rank.

/// A round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Round {
    /// Every rank sends to and writes into every other; all checked.
    Exchange,
    /// Rank `a` flushes its connection to `b` at a drain deadline; `b`
    /// sends on the old connection; both reconnect and trade a checked
    /// message.
    Flush { a: usize, b: usize },
    /// The ranks of `mask` pass `count` barriers among themselves.
    Subset { mask: u64, count: u8 },
    /// Rank 1 connects to rank 0's listener by address and they trade a
    /// checked message each way.
    ByAddress,
    /// Async operations between neighbours, some futures dropped.
    Async { ops: u8 },
    /// The job ends.
    Stop,
}

/// The bytes of a header.
pub(crate) const HEADER: usize = 16;

impl Round {
    pub(crate) fn encode(self, round: u32) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[..4].copy_from_slice(&round.to_le_bytes());
        let (kind, x, y) = match self {
            Round::Exchange => (1, 0, 0),
            Round::Flush { a, b } => (2, a as u64, b as u64),
            Round::Subset { mask, count } => (3, mask, u64::from(count)),
            Round::ByAddress => (4, 0, 0),
            Round::Async { ops } => (5, u64::from(ops), 0),
            Round::Stop => (6, 0, 0),
        };
        h[4] = kind;
        h[5..11].copy_from_slice(&x.to_le_bytes()[..6]);
        h[11..16].copy_from_slice(&y.to_le_bytes()[..5]);
        h
    }

    pub(crate) fn decode(h: &[u8]) -> Option<(u32, Round)> {
        if h.len() < HEADER {
            return None;
        }
        let round = u32::from_le_bytes(h[..4].try_into().ok()?);
        let mut x = [0u8; 8];
        x[..6].copy_from_slice(&h[5..11]);
        let mut y = [0u8; 8];
        y[..5].copy_from_slice(&h[11..16]);
        let (x, y) = (u64::from_le_bytes(x), u64::from_le_bytes(y));
        let r = match h[4] {
            1 => Round::Exchange,
            2 => Round::Flush {
                a: x as usize,
                b: y as usize,
            },
            3 => Round::Subset {
                mask: x,
                count: y as u8,
            },
            4 => Round::ByAddress,
            5 => Round::Async { ops: x as u8 },
            6 => Round::Stop,
            _ => return None,
        };
        Some((round, r))
    }

    /// Rank 0's draw for `n` ranks.
    pub(crate) fn draw(rng: &mut Rng, n: usize) -> Round {
        let pick = rng.below(100);
        match pick {
            0..45 => Round::Exchange,
            45..60 if n >= 2 => {
                let a = rng.below(n as u64) as usize;
                let b = (a + 1 + rng.below(n as u64 - 1) as usize) % n;
                Round::Flush { a, b }
            }
            60..78 if n >= 2 => {
                let mut mask = rng.next() & ((1u64 << n.min(48)) - 1);
                // At least two members.
                mask |= 1 << rng.below(n as u64);
                while mask.count_ones() < 2 {
                    mask |= 1 << rng.below(n as u64);
                }
                Round::Subset {
                    mask,
                    count: 1 + rng.below(4) as u8,
                }
            }
            78..88 if n >= 2 => Round::ByAddress,
            88..100 => Round::Async {
                ops: 4 + rng.below(28) as u8,
            },
            _ => Round::Exchange,
        }
    }
}

/// A small seeded generator (splitmix64): the soak needs variety, not
/// quality.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (n > 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let mut rng = Rng::new(7);
        for i in 0..1000 {
            let r = Round::draw(&mut rng, 8);
            assert_eq!(Round::decode(&r.encode(i)), Some((i, r)));
        }
        assert_eq!(
            Round::decode(&Round::Stop.encode(3)),
            Some((3, Round::Stop))
        );
        assert_eq!(Round::decode(&[0; 4]), None);
    }
}
