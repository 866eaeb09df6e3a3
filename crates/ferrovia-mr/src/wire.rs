//! The versioned wire form of [`RemoteMemoryRegion`].
//!
//! One version byte, then the fields as postcard varints. A decoder that
//! meets a newer version refuses it with a typed error instead of guessing.

use crate::error::MrError;
use crate::remote::RemoteMemoryRegion;

/// The wire version this build writes and reads.
pub const WIRE_VERSION: u8 = 1;

/// The longest encoding: version byte + two u64 varints (10 each) + a u32
/// varint (5).
pub const WIRE_MAX_LEN: usize = 1 + 10 + 10 + 5;

impl RemoteMemoryRegion {
    /// Encodes into `buf` (at least [`WIRE_MAX_LEN`] bytes to be safe) and
    /// returns the bytes used.
    pub fn encode_into<'b>(&self, buf: &'b mut [u8]) -> Result<&'b mut [u8], MrError> {
        let (first, rest) = buf.split_first_mut().ok_or(MrError::Truncated { len: 0 })?;
        *first = WIRE_VERSION;
        let used = postcard::to_slice(&(self.addr(), self.len(), self.rkey()), rest)
            .map_err(|e| MrError::Malformed(format!("encode buffer too small: {e}")))?
            .len();
        Ok(&mut buf[..1 + used])
    }

    /// Encodes into a new vector.
    pub fn encode(&self) -> Vec<u8> {
        let mut buf = [0u8; WIRE_MAX_LEN];
        match self.encode_into(&mut buf) {
            Ok(b) => b.to_vec(),
            // WIRE_MAX_LEN bounds every encoding.
            Err(_) => unreachable_encoding(),
        }
    }

    /// Decodes a wire form; every malformed input is a typed error.
    pub fn decode(bytes: &[u8]) -> Result<RemoteMemoryRegion, MrError> {
        let (&version, rest) = bytes.split_first().ok_or(MrError::Truncated { len: 0 })?;
        if version != WIRE_VERSION {
            return Err(MrError::UnknownWireVersion {
                found: version,
                supported: WIRE_VERSION,
            });
        }
        let ((addr, len, rkey), tail): ((u64, u64, u32), &[u8]) = postcard::take_from_bytes(rest)
            .map_err(|e| match e {
            postcard::Error::DeserializeUnexpectedEnd => MrError::Truncated { len: bytes.len() },
            other => MrError::Malformed(other.to_string()),
        })?;
        if !tail.is_empty() {
            return Err(MrError::Malformed(format!("{} trailing bytes", tail.len())));
        }
        let region = RemoteMemoryRegion::new(addr, len, rkey)?;
        // postcard also accepts over-long varints; one value has exactly one
        // wire form here, so encodings can be compared and hashed as bytes.
        let mut canonical = [0u8; WIRE_MAX_LEN];
        if region.encode_into(&mut canonical)? != bytes {
            return Err(MrError::Malformed("non-canonical varint".into()));
        }
        Ok(region)
    }
}

#[cold]
fn unreachable_encoding() -> Vec<u8> {
    // postcard varints of (u64, u64, u32) never exceed WIRE_MAX_LEN - 1.
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut v2 = good.clone();
        v2[0] = 2;
        assert!(matches!(
            RemoteMemoryRegion::decode(&v2),
            Err(MrError::UnknownWireVersion {
                found: 2,
                supported: 1
            })
        ));
        // An over-long varint for the rkey (7 = 0x87 0x00) is refused.
        let mut overlong = good.clone();
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
        // A zero length decodes as a typed error, not a region.
        let zero = postcard::to_allocvec(&(1u64, 0u64, 1u32)).unwrap();
        let mut bytes = vec![WIRE_VERSION];
        bytes.extend(zero);
        assert!(matches!(
            RemoteMemoryRegion::decode(&bytes),
            Err(MrError::ZeroLength { .. })
        ));
    }
}
