//! Property tests of the remote-region wire decoder (proptest): random
//! bytes and mutations of valid encodings must give a value or a typed
//! error, never a panic, and whatever decodes must re-encode to the same
//! bytes. Failures are shrunk and recorded under `proptest-regressions/`.

use ferrovia_mr::{MrError, RemoteMemoryRegion, WIRE_MAX_LEN};
use proptest::prelude::*;

/// Decodes `bytes`; whether they were a valid encoding.
fn check(bytes: &[u8]) -> bool {
    match RemoteMemoryRegion::decode(bytes) {
        Ok(r) => {
            // Version 1 re-encodes as the current version (with the rights
            // byte it lacked); the rest of the bytes must be the same.
            let again = r.encode();
            if bytes[0] == 1 {
                assert_eq!(
                    &again[1..again.len() - 1],
                    &bytes[1..],
                    "decoded {r:?} does not re-encode to its input"
                );
            } else {
                assert_eq!(
                    again, bytes,
                    "decoded {r:?} does not re-encode to its input"
                );
            }
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

/// A valid region: non-empty, not overflowing.
fn region() -> impl Strategy<Value = RemoteMemoryRegion> {
    (1u64..=u64::MAX / 2, any::<u64>(), any::<u32>(), 0u32..8).prop_map(
        |(len, addr, rkey, rights)| {
            let addr = addr % (u64::MAX - len);
            RemoteMemoryRegion::new(addr, len, rkey)
                .expect("in range by construction")
                .restrict(ferrovia_types::AccessFlags::from_bits(rights * 2))
        },
    )
}

/// How a valid encoding is damaged.
#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Truncate(usize),
    Append(u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        any::<usize>().prop_map(Mutation::Truncate),
        any::<u8>().prop_map(Mutation::Append),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn random_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..32), right_version in any::<bool>()) {
        if right_version && !bytes.is_empty() {
            bytes[0] = 1; // half of them get past the version check
        }
        check(&bytes);
    }

    #[test]
    fn valid_encodings_round_trip(r in region()) {
        let bytes = r.encode();
        prop_assert_eq!(RemoteMemoryRegion::decode(&bytes).unwrap(), r);
        prop_assert!(check(&bytes));
    }

    #[test]
    fn mutated_encodings_never_panic(r in region(), m in mutation()) {
        let mut bytes = r.encode();
        match m {
            Mutation::Flip { at, bit } => {
                let i = at % bytes.len();
                bytes[i] ^= 1 << bit;
            }
            Mutation::Truncate(at) => bytes.truncate(at % bytes.len()),
            Mutation::Append(b) => bytes.push(b),
        }
        check(&bytes);
    }
}
