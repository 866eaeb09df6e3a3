//! Bootstrap frames: a fixed header (magic, version, length) and a
//! postcard body. The version sits outside the body so a peer of another
//! version is recognised and refused by name, not misparsed. The length
//! is checked against a cap before any body byte is read, and the cap is
//! small until a connection has shown the job token.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use crate::error::BootstrapError;

const MAGIC: [u8; 4] = *b"FRVB";
/// The bootstrap protocol version. 2: a rank shows the token (`Join`) and
/// is welcomed before it sends what its peers need (`Blobs`). 3: each
/// rank's blob names its control port, and the control path reconnects
/// (`Knock`, `Link`). 4: a knock names the generation of the connection it
/// replaces, and a mismatch is answered as such (`Mismatch`). 5: the sync
/// region a blob describes holds abandon reasons before the directory, so
/// a rank of an earlier version would write into its peers' directories.
/// 6: a knock names the link it reconnects (0: the node's own connections;
/// a rail's id + 1), and a knock for another link is answered as such
/// (`OtherLink`); rails trade their links through rank 0's control port in
/// `Join`/`Blobs`/`Table` rounds.
/// 7: a knock names the dialer's member (its incarnation in a store-backed
/// job, else 0), and a knock from another member than expected is refused.
pub const PROTOCOL_VERSION: u16 = 7;
/// Magic, version, body length.
pub(crate) const HEADER_LEN: usize = 10;
/// The largest first message: all a connection that has not shown the job
/// token can make rank 0 read.
pub(crate) const MAX_JOIN: u32 = 2048;
/// The largest message once the token was accepted.
pub(crate) const MAX_BODY: u32 = 64 << 20;
/// The longest job token (it must fit a `Join`).
pub(crate) const MAX_TOKEN: usize = 1024;
/// The longest refusal reason: a refusal never quotes what it refuses.
pub(crate) const MAX_REASON: usize = 200;

/// A bootstrap message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Msg {
    /// A rank asks to check in: the first message of every connection.
    Join {
        token: String,
        rank: u32,
        world_size: u32,
    },
    /// Rank 0 accepted the `Join`: send the blobs.
    Welcome,
    /// What every peer needs from the rank: `blobs[j]` for rank `j`.
    Blobs { blobs: Vec<Vec<u8>> },
    /// Rank 0 refuses the connection.
    Reject { reason: String },
    /// Rank 0's answer: `blobs[j]` is what rank `j` made for the receiver.
    Table { blobs: Vec<Vec<u8>> },
    /// A rank has connected its queue pairs.
    Ready,
    /// Every rank is ready.
    Go,
    /// A peer asks, on this rank's control port, to reconnect (see
    /// `control`).
    Knock {
        token: String,
        from: u32,
        to: u32,
        /// Which of the pair's connections: 0 the node's own, else a
        /// rail's (its id + 1) or another the program names.
        link: u32,
        /// The connection's generation the dialer replaces.
        generation: u32,
        /// The dialer's member (a store-backed job's incarnation, else 0).
        incarnation: u64,
    },
    /// One side of a renewed connection.
    Link { link: Vec<u8> },
    /// The answerer replaces another generation (its own, given) than the
    /// knock named: neither call pairs.
    Mismatch { generation: u32 },
    /// The answerer reconnects another link (its own, given) than the
    /// knock named: neither call pairs.
    OtherLink { link: u32 },
}

impl Msg {
    /// A refusal, its reason cut to [`MAX_REASON`] bytes.
    pub(crate) fn reject(reason: &str) -> Msg {
        Msg::Reject {
            reason: truncate(reason, MAX_REASON).to_owned(),
        }
    }

    /// The message's name, for errors that must not quote its content.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Msg::Join { .. } => "a join",
            Msg::Welcome => "a welcome",
            Msg::Blobs { .. } => "blobs",
            Msg::Reject { .. } => "a refusal",
            Msg::Table { .. } => "a table",
            Msg::Ready => "ready",
            Msg::Go => "go",
            Msg::Knock { .. } => "a knock",
            Msg::Link { .. } => "a link",
            Msg::Mismatch { .. } => "a generation mismatch",
            Msg::OtherLink { .. } => "a link mismatch",
        }
    }
}

/// `s` cut to at most `max` bytes, at a character boundary.
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `msg` as one frame of `version`.
pub(crate) fn frame_of(version: u16, msg: &Msg) -> Result<Vec<u8>, BootstrapError> {
    let body =
        postcard::to_allocvec(msg).map_err(|e| BootstrapError::Protocol(format!("encode: {e}")))?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&l| l <= MAX_BODY)
        .ok_or_else(|| BootstrapError::Protocol(format!("a {}-byte message", body.len())))?;
    let mut frame = Vec::with_capacity(HEADER_LEN + body.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&version.to_le_bytes());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// `msg` as one frame of this version.
pub(crate) fn frame(msg: &Msg) -> Result<Vec<u8>, BootstrapError> {
    frame_of(PROTOCOL_VERSION, msg)
}

pub(crate) fn write_msg(w: &mut impl Write, msg: &Msg) -> Result<(), BootstrapError> {
    w.write_all(&frame(msg)?).map_err(|e| io("send", e))?;
    w.flush().map_err(|e| io("send", e))
}

/// The body length a header announces, if the header is ours and the
/// length at most `max`.
pub(crate) fn body_len(header: &[u8], max: u32) -> Result<usize, BootstrapError> {
    if header.len() != HEADER_LEN || header[..4] != MAGIC {
        return Err(BootstrapError::Protocol(
            "not a ferrovia bootstrap connection (bad magic)".into(),
        ));
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    if version != PROTOCOL_VERSION {
        return Err(BootstrapError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: version,
        });
    }
    let len = u32::from_le_bytes([header[6], header[7], header[8], header[9]]);
    if len > max {
        return Err(BootstrapError::Protocol(format!(
            "a {len}-byte message where at most {max} are accepted"
        )));
    }
    Ok(len as usize)
}

pub(crate) fn decode(body: &[u8]) -> Result<Msg, BootstrapError> {
    postcard::from_bytes(body)
        .map_err(|e| BootstrapError::Protocol(format!("malformed message: {e}")))
}

/// Reads one frame of at most `max` body bytes; the body grows as it
/// arrives, so a length alone allocates nothing.
pub(crate) fn read_msg(r: &mut impl Read, max: u32) -> Result<Msg, BootstrapError> {
    let mut header = [0u8; HEADER_LEN];
    r.read_exact(&mut header).map_err(|e| io("receive", e))?;
    let len = body_len(&header, max)?;
    let mut body = Vec::new();
    r.take(len as u64)
        .read_to_end(&mut body)
        .map_err(|e| io("receive", e))?;
    if body.len() != len {
        return Err(io(
            "receive",
            std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
        ));
    }
    decode(&body)
}

pub(crate) fn io(what: &str, source: std::io::Error) -> BootstrapError {
    BootstrapError::Io {
        what: what.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_frames_are_typed() {
        let msg = Msg::Blobs {
            blobs: vec![vec![1, 2], vec![]],
        };
        let buf = frame(&msg).unwrap();
        assert_eq!(read_msg(&mut &buf[..], MAX_BODY).unwrap(), msg);

        for old in [1, 3, 4, 5] {
            let v = frame_of(old, &Msg::Ready).unwrap();
            assert!(matches!(
                read_msg(&mut &v[..], MAX_BODY),
                Err(BootstrapError::VersionMismatch { ours: PROTOCOL_VERSION, theirs }) if theirs == old
            ));
        }

        assert!(matches!(
            read_msg(&mut &b"GET / HTTP/1.1\r\n"[..], MAX_BODY),
            Err(BootstrapError::Protocol(_))
        ));
        assert!(matches!(
            read_msg(&mut &buf[..buf.len() - 1], MAX_BODY),
            Err(BootstrapError::Io { .. })
        ));
        // A frame over the cap is refused from its header alone.
        assert!(matches!(
            read_msg(&mut &buf[..HEADER_LEN], 2),
            Err(BootstrapError::Protocol(_))
        ));
        let mut huge = buf[..6].to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            read_msg(&mut &huge[..], MAX_BODY),
            Err(BootstrapError::Protocol(_))
        ));
        let mut garbage = buf[..6].to_vec();
        garbage.extend_from_slice(&3u32.to_le_bytes());
        garbage.extend_from_slice(&[0xff, 0xff, 0xff]);
        assert!(matches!(
            read_msg(&mut &garbage[..], MAX_BODY),
            Err(BootstrapError::Protocol(_))
        ));
    }

    #[test]
    fn a_knock_carries_its_link_and_a_link_mismatch_round_trips() {
        let knock = Msg::Knock {
            token: "t".into(),
            from: 0,
            to: 1,
            link: 3,
            generation: 7,
            incarnation: 9,
        };
        let buf = frame(&knock).unwrap();
        assert_eq!(read_msg(&mut &buf[..], MAX_JOIN).unwrap(), knock);
        let other = Msg::OtherLink { link: u32::MAX };
        let buf = frame(&other).unwrap();
        assert_eq!(read_msg(&mut &buf[..], MAX_JOIN).unwrap(), other);
        // The largest knock still fits what is read before it is checked.
        let largest = Msg::Knock {
            token: "t".repeat(MAX_TOKEN),
            from: u32::MAX,
            to: u32::MAX,
            link: u32::MAX,
            generation: u32::MAX,
            incarnation: u64::MAX,
        };
        assert!(frame(&largest).unwrap().len() <= HEADER_LEN + MAX_JOIN as usize);
    }

    #[test]
    fn a_refusal_is_short_and_cut_at_a_character() {
        let long = "é".repeat(1000);
        let Msg::Reject { reason } = Msg::reject(&long) else {
            unreachable!()
        };
        assert!(reason.len() <= MAX_REASON && reason.len() >= MAX_REASON - 1);
        assert!(frame(&Msg::reject(&long)).unwrap().len() <= HEADER_LEN + 8 + MAX_REASON);
        let join = Msg::Join {
            token: "t".repeat(MAX_TOKEN),
            rank: u32::MAX,
            world_size: u32::MAX,
        };
        assert!(frame(&join).unwrap().len() <= HEADER_LEN + MAX_JOIN as usize);
    }
}
