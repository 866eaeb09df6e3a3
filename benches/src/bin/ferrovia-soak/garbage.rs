//! What the driver throws at a listening port: bytes a stranger, a port
//! scanner or a careless client sends.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use crate::rounds::Rng;

/// Kinds of garbage, by name for the report.
pub(crate) const KINDS: [&str; 8] = [
    "17 zero bytes",
    "4 KiB of zeros",
    "8 zeros and u64::MAX",
    "UCX tcp magic + 4 KiB of 0xff",
    "random bytes",
    "a 4 GiB length prefix",
    "HTTP",
    "slowloris",
];

/// Sends garbage of kind `kind` to `at`; whether a connection was made.
pub(crate) fn send(at: SocketAddr, kind: usize, rng: &mut Rng) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&at, Duration::from_millis(500)) else {
        return false;
    };
    let _ = s.set_write_timeout(Some(Duration::from_millis(500)));
    let bytes: Vec<u8> = match kind {
        0 => vec![0; 17],
        1 => vec![0; 4096],
        2 => [vec![0; 8], u64::MAX.to_le_bytes().to_vec()].concat(),
        3 => [
            0xCAFE_BABE_1234_5678u64.to_le_bytes().to_vec(),
            vec![0xff; 4096],
        ]
        .concat(),
        4 => (0..1 + rng.below(8192)).map(|_| rng.next() as u8).collect(),
        // The bootstrap's frame header with a 4 GiB length (the length
        // cap, not the version check, must refuse it), then the front
        // door's with the largest length.
        5 => [
            b"FRVB".to_vec(),
            ferrovia::node::bootstrap::PROTOCOL_VERSION
                .to_le_bytes()
                .to_vec(),
            vec![0xff; 4],
            b"FVCD\x01\x01\xff\xff".to_vec(),
        ]
        .concat(),
        6 => b"GET / HTTP/1.1\r\nHost: soak\r\n\r\n".to_vec(),
        _ => {
            // A byte every 100 ms for a second, then gone.
            for b in b"FVCD\x01\x01\x10" {
                if s.write_all(&[*b]).is_err() {
                    break;
                }
                thread::sleep(Duration::from_millis(100));
            }
            return true;
        }
    };
    let _ = s.write_all(&bytes);
    true
}
