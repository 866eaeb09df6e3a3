//! The front door of a UCX connection made by address: ferrovia's own
//! handshake on plain TCP, so no byte of a stranger's reaches UCX (its
//! socket connection manager aborts the process on malformed ones). The
//! two sides trade their private data and their UCX worker addresses, and
//! make their endpoints from those.
//!
//! ```text
//! frame:   'F' 'V' 'C' 'D'  version:u8  kind:u8  len:u16  body[len]
//! request: token:u16-prefixed  data:u8-prefixed  worker:u16-prefixed
//! accept:  data:u8-prefixed  worker:u16-prefixed
//! reject:  data:u8-prefixed
//! ready:   (empty)
//! ```
//! (little-endian; `data` is the private data framed as on verbs, see
//! `handshake`). A frame's length is checked against its kind's cap from
//! the header, before any body byte is read; every field is checked
//! against its own cap; anything else is refused.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;

use crate::bootstrap::wire::MAX_TOKEN;

const MAGIC: [u8; 4] = *b"FVCD";
const VERSION: u8 = 1;
/// Magic, version, kind, length.
pub(crate) const HEADER: usize = 8;
/// The longest UCX worker address taken (tcp, shared memory and IB
/// lanes fit in a few hundred bytes).
pub(crate) const MAX_WORKER: usize = 8 << 10;
/// The longest framed private data (the accept's 192 bytes and header).
const MAX_DATA: usize = 255;

/// What a front-door frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Request = 1,
    Accept = 2,
    Reject = 3,
    Ready = 4,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Request,
            2 => Kind::Accept,
            3 => Kind::Reject,
            4 => Kind::Ready,
            _ => return None,
        })
    }

    /// The longest body of this kind.
    fn cap(self) -> usize {
        match self {
            Kind::Request => 2 + MAX_TOKEN + 1 + MAX_DATA + 2 + MAX_WORKER,
            Kind::Accept => 1 + MAX_DATA + 2 + MAX_WORKER,
            Kind::Reject => 1 + MAX_DATA,
            Kind::Ready => 0,
        }
    }
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    Request {
        token: Vec<u8>,
        data: Vec<u8>,
        worker: Vec<u8>,
    },
    Accept {
        data: Vec<u8>,
        worker: Vec<u8>,
    },
    Reject {
        data: Vec<u8>,
    },
    Ready,
}

impl Frame {
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Frame::Request { .. } => Kind::Request,
            Frame::Accept { .. } => Kind::Accept,
            Frame::Reject { .. } => Kind::Reject,
            Frame::Ready => Kind::Ready,
        }
    }

    /// The frame's bytes; `None` if a field is over its cap (the callers
    /// check private data and tokens before).
    pub(crate) fn encode(&self) -> Option<Vec<u8>> {
        let mut body = Vec::new();
        match self {
            Frame::Request {
                token,
                data,
                worker,
            } => {
                put16(&mut body, token, MAX_TOKEN)?;
                put8(&mut body, data)?;
                put16(&mut body, worker, MAX_WORKER)?;
            }
            Frame::Accept { data, worker } => {
                put8(&mut body, data)?;
                put16(&mut body, worker, MAX_WORKER)?;
            }
            Frame::Reject { data } => put8(&mut body, data)?,
            Frame::Ready => {}
        }
        let mut v = Vec::with_capacity(HEADER + body.len());
        v.extend_from_slice(&MAGIC);
        v.push(VERSION);
        v.push(self.kind() as u8);
        v.extend_from_slice(&u16::try_from(body.len()).ok()?.to_le_bytes());
        v.extend_from_slice(&body);
        Some(v)
    }

    fn decode(kind: Kind, body: &[u8]) -> Result<Frame, String> {
        let mut r = Fields(body);
        let frame = match kind {
            Kind::Request => Frame::Request {
                token: r.take16(MAX_TOKEN, "token")?,
                data: r.take8("private data")?,
                worker: r.take16(MAX_WORKER, "worker address")?,
            },
            Kind::Accept => Frame::Accept {
                data: r.take8("private data")?,
                worker: r.take16(MAX_WORKER, "worker address")?,
            },
            Kind::Reject => Frame::Reject {
                data: r.take8("private data")?,
            },
            Kind::Ready => Frame::Ready,
        };
        if !r.0.is_empty() {
            return Err(format!("{} bytes after the fields", r.0.len()));
        }
        Ok(frame)
    }
}

fn put8(v: &mut Vec<u8>, field: &[u8]) -> Option<()> {
    v.push(u8::try_from(field.len()).ok()?);
    v.extend_from_slice(field);
    Some(())
}

fn put16(v: &mut Vec<u8>, field: &[u8], cap: usize) -> Option<()> {
    if field.len() > cap {
        return None;
    }
    v.extend_from_slice(&u16::try_from(field.len()).ok()?.to_le_bytes());
    v.extend_from_slice(field);
    Some(())
}

struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take(&mut self, n: usize, what: &str) -> Result<Vec<u8>, String> {
        if self.0.len() < n {
            return Err(format!("the {what} is cut short"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head.to_vec())
    }

    fn take8(&mut self, what: &str) -> Result<Vec<u8>, String> {
        let n = *self.take(1, what)?.first().unwrap_or(&0);
        self.take(usize::from(n), what)
    }

    fn take16(&mut self, cap: usize, what: &str) -> Result<Vec<u8>, String> {
        let len = self.take(2, what)?;
        let n = usize::from(u16::from_le_bytes([len[0], len[1]]));
        if n > cap {
            return Err(format!("a {n}-byte {what} (at most {cap})"));
        }
        self.take(n, what)
    }
}

/// Reads one frame from a stream, a little at a time: the header first,
/// checked, then at most the body it announced.
#[derive(Debug, Default)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
    /// The frame's kind and body length, once the header is in.
    head: Option<(Kind, usize)>,
}

/// What a read found.
#[derive(Debug)]
pub(crate) enum Read1 {
    /// A whole frame.
    Frame(Frame),
    /// Not yet (a non-blocking stream had nothing more).
    More,
    /// The peer closed the connection before a whole frame.
    Closed,
    /// Not a frame of ours, or a broken one: why (never quoting it).
    Bad(String),
}

impl FrameReader {
    /// Reads what `s` has (without blocking, if it does not block) until a
    /// frame is whole; at most its announced length.
    pub(crate) fn read(&mut self, s: &mut TcpStream) -> Read1 {
        loop {
            let want = match self.head {
                None => HEADER,
                Some((_, len)) => HEADER + len,
            };
            if self.buf.len() == want {
                match self.head {
                    None => {
                        if let Err(why) = self.parse_header() {
                            return Read1::Bad(why);
                        }
                        continue;
                    }
                    Some((kind, _)) => {
                        return match Frame::decode(kind, &self.buf[HEADER..]) {
                            Ok(f) => Read1::Frame(f),
                            Err(why) => Read1::Bad(why),
                        };
                    }
                }
            }
            let mut chunk = [0u8; 4096];
            let room = (want - self.buf.len()).min(chunk.len());
            match s.read(&mut chunk[..room]) {
                Ok(0) => return Read1::Closed,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Read1::More;
                }
                Err(e) => return Read1::Bad(format!("read: {e}")),
            }
        }
    }

    fn parse_header(&mut self) -> Result<(), String> {
        let h = &self.buf[..HEADER];
        if h[..4] != MAGIC {
            return Err("not a ferrovia connection request".into());
        }
        if h[4] != VERSION {
            return Err(format!(
                "front door version {}; this side speaks {VERSION}",
                h[4]
            ));
        }
        let kind = Kind::from_u8(h[5]).ok_or_else(|| format!("unknown frame kind {}", h[5]))?;
        let len = usize::from(u16::from_le_bytes([h[6], h[7]]));
        if len > kind.cap() {
            return Err(format!(
                "a {len}-byte {kind:?} (at most {} bytes)",
                kind.cap()
            ));
        }
        self.head = Some((kind, len));
        Ok(())
    }
}

/// Writes a whole frame to a blocking stream (its write timeout bounds it).
pub(crate) fn send(s: &mut TcpStream, frame: &Frame) -> std::io::Result<()> {
    let bytes = frame
        .encode()
        .ok_or_else(|| std::io::Error::new(ErrorKind::InvalidInput, "a field over its cap"))?;
    s.write_all(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    fn read_all(bytes: &[u8]) -> Read1 {
        let (mut a, mut b) = pair();
        a.write_all(bytes).unwrap();
        drop(a);
        let mut r = FrameReader::default();
        loop {
            match r.read(&mut b) {
                Read1::More => continue,
                other => return other,
            }
        }
    }

    #[test]
    fn frames_round_trip() {
        for f in [
            Frame::Request {
                token: b"secret".to_vec(),
                data: vec![1; 56],
                worker: vec![2; MAX_WORKER],
            },
            Frame::Accept {
                data: vec![],
                worker: vec![3; 300],
            },
            Frame::Reject { data: vec![4; 148] },
            Frame::Ready,
        ] {
            match read_all(&f.encode().unwrap()) {
                Read1::Frame(g) => assert_eq!(g, f),
                other => panic!("{f:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn garbage_is_refused_from_the_header() {
        for bytes in [
            vec![0u8; 17],
            vec![0xff; 4096],
            b"GET / HTTP/1.1\r\n\r\n".to_vec(),
            // UCX's tcp magic number and 4 KiB of 0xff.
            [
                0xCAFE_BABE_1234_5678u64.to_le_bytes().to_vec(),
                vec![0xff; 4096],
            ]
            .concat(),
        ] {
            assert!(
                matches!(read_all(&bytes), Read1::Bad(_)),
                "{:?}",
                &bytes[..8]
            );
        }
        // A length over the kind's cap is refused before its body.
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&[VERSION, Kind::Ready as u8, 1, 0]);
        assert!(matches!(read_all(&huge), Read1::Bad(_)));
        // A field over its cap inside a frame of legal length.
        let mut bad = Frame::Request {
            token: vec![],
            data: vec![],
            worker: vec![],
        }
        .encode()
        .unwrap();
        bad[HEADER + 2] = 0xff; // the data length says 255: cut short
        assert!(matches!(read_all(&bad), Read1::Bad(_)));
        // A connection that closes early.
        assert!(matches!(read_all(&MAGIC), Read1::Closed));
    }
}
