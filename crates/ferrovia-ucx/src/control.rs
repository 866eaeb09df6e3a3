//! Control messages between progress threads (UCX active messages): a
//! peer asks for a registration's key the first time it accesses it; the
//! owner revokes it on deregistration and waits for the acknowledgement;
//! a transport that shuts down says goodbye; a side that flushes a
//! connection tells the peer, which then breaks its side too (as an RC
//! queue pair's peer does once its retries fail). Everything received is
//! validated; a malformed message is counted and dropped.
//!
//! ```text
//! request: 'Q' from:u32 key:u32
//! reply:   'R' from:u32 key:u32 found:u8 access:u32 addr:u64 len:u64 iova:u64 n:u16 packed[n]
//! revoke:  'V' from:u32 key:u32   (the owner deregistered the key)
//! ack:     'A' from:u32 key:u32   (nothing of the sender's can reach the key any more)
//! goodbye: 'B' from:u32           (the sender flushed and closes its endpoints)
//! reset:   'X' from:u32 gen:u32   (the sender flushed its connection of generation gen)
//! ```
//! (little-endian)

use ferrovia_types::AccessFlags;

use crate::keys::KeyInfo;

/// The active-message id the transport listens on.
pub(crate) const AM_ID: u32 = 0x4652; // "FR"

const REQUEST: u8 = b'Q';
const REPLY: u8 = b'R';
const REVOKE: u8 = b'V';
const ACK: u8 = b'A';
const GOODBYE: u8 = b'B';
const RESET: u8 = b'X';
const REPLY_FIXED: usize = 1 + 4 + 4 + 1 + 4 + 8 + 8 + 8 + 2;

/// A decoded control message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Control {
    /// `from` asks for `key`.
    Request { from: u32, key: u32 },
    /// `from` answers for `key`: `None` when it has no such registration.
    Reply {
        from: u32,
        key: u32,
        info: Option<KeyInfo>,
    },
    /// `from` deregistered `key`: forget it.
    Revoke { from: u32, key: u32 },
    /// `from` forgot `key`, and none of its accesses with it is in flight.
    Ack { from: u32, key: u32 },
    /// `from` shuts down: its accesses are flushed and it issues no more.
    Goodbye { from: u32 },
    /// `from` flushed its connection of `generation` to the receiver: it
    /// issues nothing more on it and takes nothing more from it.
    Reset { from: u32, generation: u32 },
}

impl Control {
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Control::Request { from, key }
            | Control::Revoke { from, key }
            | Control::Ack { from, key }
            | Control::Reset {
                from,
                generation: key,
            } => {
                let kind = match self {
                    Control::Request { .. } => REQUEST,
                    Control::Revoke { .. } => REVOKE,
                    Control::Reset { .. } => RESET,
                    _ => ACK,
                };
                let mut v = vec![kind];
                v.extend_from_slice(&from.to_le_bytes());
                v.extend_from_slice(&key.to_le_bytes());
                v
            }
            Control::Goodbye { from } => {
                let mut v = vec![GOODBYE];
                v.extend_from_slice(&from.to_le_bytes());
                v
            }
            Control::Reply { from, key, info } => {
                let packed = info.as_ref().map_or(&[][..], |i| &i.packed[..]);
                let mut v = Vec::with_capacity(REPLY_FIXED + packed.len());
                v.push(REPLY);
                v.extend_from_slice(&from.to_le_bytes());
                v.extend_from_slice(&key.to_le_bytes());
                v.push(u8::from(info.is_some()));
                let (access, addr, len, iova) = info
                    .as_ref()
                    .map_or((0, 0, 0, 0), |i| (i.access.bits(), i.addr, i.len, i.iova));
                v.extend_from_slice(&access.to_le_bytes());
                v.extend_from_slice(&addr.to_le_bytes());
                v.extend_from_slice(&len.to_le_bytes());
                v.extend_from_slice(&iova.to_le_bytes());
                v.extend_from_slice(&(packed.len() as u16).to_le_bytes());
                v.extend_from_slice(packed);
                v
            }
        }
    }

    /// Decodes one message; `None` when it is malformed.
    pub(crate) fn decode(b: &[u8]) -> Option<Control> {
        let mut r = Reader(b);
        let kind = r.take::<1>()?[0];
        let from = u32::from_le_bytes(r.take()?);
        if kind == GOODBYE {
            return r.0.is_empty().then_some(Control::Goodbye { from });
        }
        let key = u32::from_le_bytes(r.take()?);
        match kind {
            REQUEST => r.0.is_empty().then_some(Control::Request { from, key }),
            REVOKE => r.0.is_empty().then_some(Control::Revoke { from, key }),
            ACK => r.0.is_empty().then_some(Control::Ack { from, key }),
            RESET => r.0.is_empty().then_some(Control::Reset {
                from,
                generation: key,
            }),
            REPLY => {
                let found = r.take::<1>()?[0];
                let access = u32::from_le_bytes(r.take()?);
                let addr = u64::from_le_bytes(r.take()?);
                let len = u64::from_le_bytes(r.take()?);
                let iova = u64::from_le_bytes(r.take()?);
                let n = u16::from_le_bytes(r.take()?) as usize;
                if r.0.len() != n {
                    return None;
                }
                let info = match found {
                    0 if n == 0 => None,
                    1 => Some(KeyInfo {
                        addr,
                        len,
                        iova,
                        access: AccessFlags::from_bits(access),
                        packed: r.0.to_vec(),
                    }),
                    _ => return None,
                };
                Some(Control::Reply { from, key, info })
            }
            _ => None,
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> KeyInfo {
        KeyInfo {
            addr: 0xdead_b000,
            len: 1 << 20,
            iova: 0,
            access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            packed: (0..=200u8).collect(),
        }
    }

    #[test]
    fn messages_round_trip() {
        for m in [
            Control::Request { from: 3, key: 9 },
            Control::Revoke { from: 4, key: 10 },
            Control::Ack { from: 5, key: 11 },
            Control::Goodbye { from: 6 },
            Control::Reset {
                from: 7,
                generation: 3,
            },
            Control::Reply {
                from: 1,
                key: 2,
                info: Some(info()),
            },
            Control::Reply {
                from: 1,
                key: 2,
                info: None,
            },
        ] {
            assert_eq!(Control::decode(&m.encode()), Some(m));
        }
    }

    #[test]
    fn malformed_messages_are_refused() {
        let good = Control::Reply {
            from: 1,
            key: 2,
            info: Some(info()),
        }
        .encode();
        for cut in 0..good.len() {
            assert_eq!(Control::decode(&good[..cut]), None, "prefix of {cut} bytes");
        }
        let mut long = good.clone();
        long.push(0);
        assert_eq!(Control::decode(&long), None);
        let mut bad_kind = good.clone();
        bad_kind[0] = b'X';
        assert_eq!(Control::decode(&bad_kind), None);
        let mut bad_flag = good;
        bad_flag[9] = 7;
        assert_eq!(Control::decode(&bad_flag), None);
        for short in [
            Control::Request { from: 0, key: 1 },
            Control::Revoke { from: 0, key: 1 },
            Control::Ack { from: 0, key: 1 },
            Control::Goodbye { from: 0 },
            Control::Reset {
                from: 0,
                generation: 1,
            },
        ] {
            let bytes = short.encode();
            for cut in 0..bytes.len() {
                assert_eq!(
                    Control::decode(&bytes[..cut]),
                    None,
                    "{short:?} cut to {cut}"
                );
            }
            let mut long = bytes;
            long.push(1);
            assert_eq!(Control::decode(&long), None, "{short:?} with a byte more");
        }
        assert_eq!(Control::decode(&[]), None);
    }
}
