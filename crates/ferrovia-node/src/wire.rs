//! Bootstrap frames: a fixed header (magic, version, length) and a
//! postcard body. The version sits outside the body so a peer of another
//! version is recognised and refused by name, not misparsed.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use crate::error::BootstrapError;

const MAGIC: [u8; 4] = *b"FRVB";
/// The bootstrap protocol version.
pub const PROTOCOL_VERSION: u16 = 1;
/// Largest body accepted: a stranger cannot make rank 0 allocate more.
const MAX_BODY: u32 = 64 << 20;

/// A bootstrap message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Msg {
    /// A rank checks in: `blobs[j]` is what rank `j` needs from it.
    Hello {
        token: String,
        rank: u32,
        world_size: u32,
        blobs: Vec<Vec<u8>>,
    },
    /// Rank 0 refuses the connection.
    Reject { reason: String },
    /// Rank 0's answer: `blobs[j]` is what rank `j` made for the receiver.
    Table { blobs: Vec<Vec<u8>> },
    /// A rank has connected its queue pairs.
    Ready,
    /// Every rank is ready.
    Go,
}

pub(crate) fn write_msg(w: &mut impl Write, msg: &Msg) -> Result<(), BootstrapError> {
    write_versioned(w, PROTOCOL_VERSION, msg)
}

pub(crate) fn write_versioned(
    w: &mut impl Write,
    version: u16,
    msg: &Msg,
) -> Result<(), BootstrapError> {
    let body =
        postcard::to_allocvec(msg).map_err(|e| BootstrapError::Protocol(format!("encode: {e}")))?;
    let len = u32::try_from(body.len())
        .map_err(|_| BootstrapError::Protocol("message too large".into()))?;
    let mut frame = Vec::with_capacity(10 + body.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&version.to_le_bytes());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame).map_err(|e| io("send", e))?;
    w.flush().map_err(|e| io("send", e))
}

pub(crate) fn read_msg(r: &mut impl Read) -> Result<Msg, BootstrapError> {
    let mut header = [0u8; 10];
    r.read_exact(&mut header).map_err(|e| io("receive", e))?;
    if header[..4] != MAGIC {
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
    if len > MAX_BODY {
        return Err(BootstrapError::Protocol(format!(
            "{len}-byte message exceeds {MAX_BODY}"
        )));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body).map_err(|e| io("receive", e))?;
    postcard::from_bytes(&body)
        .map_err(|e| BootstrapError::Protocol(format!("malformed message: {e}")))
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
        let msg = Msg::Hello {
            token: "t".into(),
            rank: 3,
            world_size: 4,
            blobs: vec![vec![1, 2], vec![]],
        };
        let mut buf = Vec::new();
        write_msg(&mut buf, &msg).unwrap();
        assert_eq!(read_msg(&mut &buf[..]).unwrap(), msg);

        let mut v2 = Vec::new();
        write_versioned(&mut v2, 2, &Msg::Ready).unwrap();
        assert!(matches!(
            read_msg(&mut &v2[..]),
            Err(BootstrapError::VersionMismatch { ours: 1, theirs: 2 })
        ));

        assert!(matches!(
            read_msg(&mut &b"GET / HTTP/1.1\r\n"[..]),
            Err(BootstrapError::Protocol(_))
        ));
        assert!(matches!(
            read_msg(&mut &buf[..buf.len() - 1]),
            Err(BootstrapError::Io { .. })
        ));
        let mut huge = buf[..6].to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            read_msg(&mut &huge[..]),
            Err(BootstrapError::Protocol(_))
        ));
        let mut garbage = buf[..6].to_vec();
        garbage.extend_from_slice(&3u32.to_le_bytes());
        garbage.extend_from_slice(&[0xff, 0xff, 0xff]);
        assert!(matches!(
            read_msg(&mut &garbage[..]),
            Err(BootstrapError::Protocol(_))
        ));
    }
}
