//! The private data of a connection made by address, framed the same way
//! on both backends: a 4-byte header (`fv`, the version, the message kind)
//! and a length, so the receiver gets exactly what was sent (IB and RoCE
//! deliver the connection manager's whole zero-padded area), and the
//! limits are the connection manager's less the header on both backends,
//! so a program behaves the same on either.
//!
//! ```text
//! 'f' 'v'  version<<4 | kind  len  data[len]
//! ```
//! Kinds: 1 request (client → server), 2 accept, 3 reject (server →
//! client), 4 ready (client → server, UCX only: the connection manager's
//! own "ready to use" on verbs).

use std::net::SocketAddr;

use crate::by_address::error::ConnectError;

/// Header bytes before the data.
const HEADER: usize = 4;
const MAGIC: [u8; 2] = *b"fv";
const VERSION: u8 = 1;

/// The most private data a client sends with its request (the IB / RoCE
/// connection manager's 56 bytes less the header).
pub const CONNECT_DATA_MAX: usize = 56 - HEADER;
/// The most private data an accept carries (196 less the header).
pub const ACCEPT_DATA_MAX: usize = 196 - HEADER;
/// The most private data a reject carries (148 less the header).
pub const REJECT_DATA_MAX: usize = 148 - HEADER;

/// What a handshake message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Request = 1,
    Accept = 2,
    Reject = 3,
    Ready = 4,
}

impl Kind {
    fn max(self) -> usize {
        match self {
            Kind::Request => CONNECT_DATA_MAX,
            Kind::Accept => ACCEPT_DATA_MAX,
            Kind::Reject => REJECT_DATA_MAX,
            Kind::Ready => 0,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Kind::Request => "connect request",
            Kind::Accept => "accept",
            Kind::Reject => "reject",
            Kind::Ready => "ready message",
        }
    }

    fn from_bits(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Request,
            2 => Kind::Accept,
            3 => Kind::Reject,
            4 => Kind::Ready,
            _ => return None,
        })
    }
}

/// Frames `data` as a `kind` message to or from `addr`; refuses more than
/// the kind carries.
pub(crate) fn encode(kind: Kind, data: &[u8], addr: SocketAddr) -> Result<Vec<u8>, ConnectError> {
    if data.len() > kind.max() {
        return Err(ConnectError::PrivateDataTooLong {
            what: kind.what(),
            addr,
            len: data.len(),
            max: kind.max(),
        });
    }
    let mut v = Vec::with_capacity(HEADER + data.len());
    v.extend_from_slice(&MAGIC);
    v.push(VERSION << 4 | kind as u8);
    v.push(data.len() as u8);
    v.extend_from_slice(data);
    Ok(v)
}

/// A received message, decoded.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded<'a> {
    /// A ferrovia message of this version.
    Ours(Kind, &'a [u8]),
    /// Not ferrovia's framing (a C peer's private data): the bytes as
    /// they came.
    Foreign(&'a [u8]),
    /// ferrovia's framing, but unusable: why.
    Bad(String),
}

/// Decodes a message. Bytes past the length are ignored (the connection
/// manager's padding).
pub(crate) fn decode(bytes: &[u8]) -> Decoded<'_> {
    let Some((head, rest)) = bytes.split_first_chunk::<HEADER>() else {
        return Decoded::Foreign(bytes);
    };
    if head[..2] != MAGIC {
        return Decoded::Foreign(bytes);
    }
    let (version, kind) = (head[2] >> 4, head[2] & 0xf);
    if version != VERSION {
        return Decoded::Bad(format!(
            "connection handshake version {version}; this side speaks {VERSION}"
        ));
    }
    let Some(kind) = Kind::from_bits(kind) else {
        return Decoded::Bad(format!("unknown handshake message kind {kind}"));
    };
    let len = usize::from(head[3]);
    if len > kind.max() || len > rest.len() {
        return Decoded::Bad(format!(
            "a {} of {len} bytes ({} received, at most {} allowed)",
            kind.what(),
            rest.len(),
            kind.max()
        ));
    }
    Decoded::Ours(kind, &rest[..len])
}

/// The message `bytes` must be, of `kind`: its data, or the protocol
/// error naming `addr`.
#[cfg_attr(not(feature = "ucx"), allow(dead_code))]
pub(crate) fn expect(kind: Kind, bytes: &[u8], addr: SocketAddr) -> Result<&[u8], ConnectError> {
    match decode(bytes) {
        Decoded::Ours(k, data) if k == kind => Ok(data),
        Decoded::Ours(k, _) => Err(ConnectError::Protocol {
            addr,
            reason: format!("expected a {}, got a {}", kind.what(), k.what()),
        }),
        Decoded::Foreign(_) => Err(ConnectError::Protocol {
            addr,
            reason: format!(
                "expected a {}, got bytes not framed by ferrovia",
                kind.what()
            ),
        }),
        Decoded::Bad(reason) => Err(ConnectError::Protocol { addr, reason }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> SocketAddr {
        "192.0.2.1:7471".parse().unwrap()
    }

    #[test]
    fn messages_round_trip_exactly_even_when_padded() {
        for (kind, data) in [
            (Kind::Request, &b"hello"[..]),
            (Kind::Accept, &[7u8; ACCEPT_DATA_MAX][..]),
            (Kind::Reject, &[][..]),
            (Kind::Ready, &[][..]),
        ] {
            let mut bytes = encode(kind, data, addr()).unwrap();
            assert_eq!(decode(&bytes), Decoded::Ours(kind, data));
            // The connection manager pads the area with zeroes.
            bytes.resize(196, 0);
            assert_eq!(decode(&bytes), Decoded::Ours(kind, data));
        }
    }

    #[test]
    fn the_limits_leave_room_for_the_header_in_the_cm_areas() {
        assert_eq!(CONNECT_DATA_MAX + HEADER, 56);
        assert_eq!(ACCEPT_DATA_MAX + HEADER, 196);
        assert_eq!(REJECT_DATA_MAX + HEADER, 148);
        for (kind, max) in [
            (Kind::Request, CONNECT_DATA_MAX),
            (Kind::Accept, ACCEPT_DATA_MAX),
            (Kind::Reject, REJECT_DATA_MAX),
        ] {
            assert!(encode(kind, &vec![0; max], addr()).is_ok());
            match encode(kind, &vec![0; max + 1], addr()) {
                Err(ConnectError::PrivateDataTooLong {
                    len,
                    max: m,
                    addr: a,
                    ..
                }) => {
                    assert_eq!((len, m, a), (max + 1, max, addr()));
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn foreign_and_bad_messages_are_told_apart() {
        // A C peer's request: no framing (rdma_client sends none: zeroes).
        assert_eq!(decode(&[0; 56]), Decoded::Foreign(&[0; 56][..]));
        assert_eq!(decode(b"fv"), Decoded::Foreign(&b"fv"[..]));
        assert!(matches!(
            decode(&[b'f', b'v', 2 << 4 | 1, 0]),
            Decoded::Bad(_)
        ));
        assert!(matches!(
            decode(&[b'f', b'v', 1 << 4 | 9, 0]),
            Decoded::Bad(_)
        ));
        // A length beyond the kind's limit, or beyond what arrived.
        assert!(matches!(
            decode(&[b'f', b'v', 1 << 4 | 1, 53]),
            Decoded::Bad(_)
        ));
        assert!(matches!(
            decode(&[b'f', b'v', 1 << 4 | 2, 5, 1]),
            Decoded::Bad(_)
        ));
        let accept = encode(Kind::Accept, b"x", addr()).unwrap();
        assert!(matches!(
            expect(Kind::Request, &accept, addr()),
            Err(ConnectError::Protocol { .. })
        ));
        assert_eq!(expect(Kind::Accept, &accept, addr()).unwrap(), b"x");
    }
}
