//! The versioned wire form of [`RemoteMemoryRegion`].
//!
//! One version byte, then `addr`, `len` and `rkey` as unsigned LEB128
//! varints and one byte of remote rights: exactly postcard's encoding of
//! `(u64, u64, u32, u8)` (a test checks it against postcard), written by
//! hand because this sits on the descriptor-exchange path and must stay a
//! few nanoseconds. Only the canonical (shortest) form decodes, so one
//! region has one encoding. Version 1 (no rights byte) still decodes, as a
//! region whose rights are not known; a newer version is refused with a
//! typed error instead of guessed at.

use crate::error::MrError;
use crate::remote::{RemoteMemoryRegion, rights};

/// The wire version this build writes (it reads this one and 1).
pub const WIRE_VERSION: u8 = 2;

/// The longest encoding: version byte + two u64 varints (10 each) + a u32
/// varint (5) + the rights byte.
pub const WIRE_MAX_LEN: usize = 1 + 10 + 10 + 5 + 1;

fn put_varint(out: &mut [u8; WIRE_MAX_LEN], pos: &mut usize, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out[*pos] = byte;
            *pos += 1;
            return;
        }
        out[*pos] = byte | 0x80;
        *pos += 1;
    }
}

#[inline(always)]
fn take_varint(bytes: &[u8], pos: &mut usize, bits: u32) -> Result<u64, MrError> {
    let max_len = bits.div_ceil(7) as usize;
    let rest = bytes.get(*pos..).unwrap_or_default();
    let mut v = 0u64;
    for (i, &byte) in rest.iter().take(max_len).enumerate() {
        let shift = 7 * i as u32;
        let chunk = u64::from(byte & 0x7f);
        if shift + 7 > bits && chunk >> (bits - shift) != 0 {
            return Err(MrError::Malformed(format!("varint exceeds {bits} bits")));
        }
        v |= chunk << shift;
        if byte & 0x80 == 0 {
            if byte == 0 && i > 0 {
                return Err(MrError::Malformed("non-canonical varint".into()));
            }
            *pos += i + 1;
            return Ok(v);
        }
    }
    if rest.len() < max_len {
        Err(MrError::Truncated { len: bytes.len() })
    } else {
        Err(MrError::Malformed(format!(
            "varint longer than {max_len} bytes"
        )))
    }
}

impl RemoteMemoryRegion {
    /// Encodes into `buf` and returns the bytes used.
    pub fn encode_into<'b>(&self, buf: &'b mut [u8; WIRE_MAX_LEN]) -> &'b [u8] {
        buf[0] = WIRE_VERSION;
        let mut pos = 1;
        put_varint(buf, &mut pos, self.addr());
        put_varint(buf, &mut pos, self.len());
        put_varint(buf, &mut pos, u64::from(self.rkey()));
        buf[pos] = self.access().bits() as u8;
        pos += 1;
        &buf[..pos]
    }

    /// Encodes into a new vector.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_into(&mut [0; WIRE_MAX_LEN]).to_vec()
    }

    /// Decodes a wire form; every malformed input is a typed error.
    pub fn decode(bytes: &[u8]) -> Result<RemoteMemoryRegion, MrError> {
        let &version = bytes.first().ok_or(MrError::Truncated { len: 0 })?;
        if version != WIRE_VERSION && version != 1 {
            return Err(MrError::UnknownWireVersion {
                found: version,
                supported: WIRE_VERSION,
            });
        }
        let mut pos = 1;
        let addr = take_varint(bytes, &mut pos, 64)?;
        let len = take_varint(bytes, &mut pos, 64)?;
        let rkey = take_varint(bytes, &mut pos, 32)? as u32;
        let access = if version == 1 {
            ferrovia_types::AccessFlags::REMOTE_ANY
        } else {
            let &byte = bytes
                .get(pos)
                .ok_or(MrError::Truncated { len: bytes.len() })?;
            pos += 1;
            rights(byte)?
        };
        if pos != bytes.len() {
            return Err(MrError::Malformed(format!(
                "{} trailing bytes",
                bytes.len() - pos
            )));
        }
        Ok(RemoteMemoryRegion::new(addr, len, rkey)?.restrict(access))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrovia_types::AccessFlags;

    #[test]
    fn round_trip_and_sizes() {
        for r in [
            RemoteMemoryRegion::new(0, 1, 0).unwrap(),
            RemoteMemoryRegion::new(0x7f00_dead_0000, 1 << 34, 0xabcd_ef01).unwrap(),
            RemoteMemoryRegion::new(u64::MAX - 1, 1, u32::MAX).unwrap(),
        ] {
            let bytes = r.encode();
            assert!(bytes.len() <= WIRE_MAX_LEN);
            assert_eq!(bytes[0], WIRE_VERSION);
            assert_eq!(RemoteMemoryRegion::decode(&bytes).unwrap(), r);
        }
    }

    #[test]
    fn the_encoding_is_postcards() {
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut checked = 0;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (addr, len, rkey) = (
                x >> (x % 64),
                1 + (x.rotate_left(9) >> (x % 61)),
                (x >> 20) as u32,
            );
            let Ok(r) = RemoteMemoryRegion::new(addr, len, rkey) else {
                continue;
            };
            let rights = (x % 8) as u8 * 2; // every subset of the remote bits
            let r = r.restrict(AccessFlags::from_bits(u32::from(rights)));
            let ours = r.encode();
            let theirs = postcard::to_allocvec(&(addr, len, rkey, rights)).unwrap();
            assert_eq!(&ours[1..], &theirs[..]);
            let back: (u64, u64, u32, u8) = postcard::from_bytes(&ours[1..]).unwrap();
            assert_eq!(back, (addr, len, rkey, rights));
            checked += 1;
        }
        assert!(checked > 1000);
    }

    #[test]
    fn bad_input_is_typed() {
        let good = RemoteMemoryRegion::new(0x1000, 4096, 7).unwrap().encode();
        assert!(matches!(
            RemoteMemoryRegion::decode(&[]),
            Err(MrError::Truncated { len: 0 })
        ));
        for cut in 1..good.len() {
            assert!(
                matches!(
                    RemoteMemoryRegion::decode(&good[..cut]),
                    Err(MrError::Truncated { .. })
                ),
                "cut at {cut}"
            );
        }
        let mut v3 = good.clone();
        v3[0] = 3;
        assert!(matches!(
            RemoteMemoryRegion::decode(&v3),
            Err(MrError::UnknownWireVersion {
                found: 3,
                supported: 2
            })
        ));
        // Rights that are not remote ones (LOCAL_WRITE) are refused.
        let mut local = good.clone();
        *local.last_mut().unwrap() = 1;
        assert!(matches!(
            RemoteMemoryRegion::decode(&local),
            Err(MrError::Malformed(_))
        ));
        // Version 1 has no rights byte: its rights are not known.
        let mut v1 = good[..good.len() - 1].to_vec();
        v1[0] = 1;
        let old = RemoteMemoryRegion::decode(&v1).unwrap();
        assert_eq!(old.access(), AccessFlags::REMOTE_ANY);
        // An over-long varint for the rkey (7 = 0x87 0x00) is refused.
        let mut overlong = v1.clone();
        let last = overlong.len() - 1;
        overlong[last] |= 0x80;
        overlong.push(0);
        assert!(matches!(
            RemoteMemoryRegion::decode(&overlong),
            Err(MrError::Malformed(_))
        ));
        let mut long = good.clone();
        long.push(0);
        assert!(matches!(
            RemoteMemoryRegion::decode(&long),
            Err(MrError::Malformed(_))
        ));
        // An rkey beyond 32 bits, and an 11-byte u64, are refused.
        let too_big = [1, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x1f];
        assert!(matches!(
            RemoteMemoryRegion::decode(&too_big),
            Err(MrError::Malformed(_))
        ));
        let mut eleven = vec![1u8];
        eleven.extend([0xff; 10]);
        eleven.push(1);
        assert!(matches!(
            RemoteMemoryRegion::decode(&eleven),
            Err(MrError::Malformed(_))
        ));
        // A zero length decodes as a typed error, not a region.
        assert!(matches!(
            RemoteMemoryRegion::decode(&[1, 1, 0, 1]),
            Err(MrError::ZeroLength { .. })
        ));
    }
}
