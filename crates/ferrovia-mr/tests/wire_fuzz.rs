//! Bounded fuzzing of the remote-region wire decoder: random bytes and
//! mutations of valid encodings must give a value or a typed error, never
//! a panic, and whatever decodes must re-encode to the same bytes.

use ferrovia_mr::{MrError, RemoteMemoryRegion, WIRE_MAX_LEN};

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn check(bytes: &[u8]) -> bool {
    match RemoteMemoryRegion::decode(bytes) {
        Ok(r) => {
            assert_eq!(
                r.encode(),
                bytes,
                "decoded {r:?} does not re-encode to its input"
            );
            assert!(bytes.len() <= WIRE_MAX_LEN);
            true
        }
        Err(
            MrError::Truncated { .. }
            | MrError::Malformed(_)
            | MrError::UnknownWireVersion { .. }
            | MrError::ZeroLength { .. }
            | MrError::Overflow { .. },
        ) => false,
        Err(other) => panic!("unexpected error kind for {bytes:?}: {other:?}"),
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut decoded = 0;
    for _ in 0..300_000 {
        let len = (rng.next() % 32) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if len > 0 && rng.next().is_multiple_of(2) {
            bytes[0] = 1; // make half of them the right version
        }
        decoded += usize::from(check(&bytes));
    }
    assert!(decoded > 0, "the fuzzer never produced a valid encoding");
}

#[test]
fn mutated_encodings_never_panic() {
    let mut rng = Rng(42);
    for _ in 0..50_000 {
        let len = 1 + rng.next() % (1 << 40);
        let addr = rng.next() % (u64::MAX - len);
        let r = RemoteMemoryRegion::new(addr, len, rng.next() as u32).unwrap();
        let mut bytes = r.encode();
        assert_eq!(RemoteMemoryRegion::decode(&bytes).unwrap(), r);
        match rng.next() % 3 {
            0 => {
                let i = (rng.next() as usize) % bytes.len();
                bytes[i] ^= 1 << (rng.next() % 8);
            }
            1 => bytes.truncate((rng.next() as usize) % bytes.len()),
            _ => bytes.push(rng.next() as u8),
        }
        check(&bytes);
    }
}
