//! A job of ranks as threads of this process, each opening datagrams
//! through its node: what the datagram tests of either backend share.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use ferrovia_channel::Datagrams;
use ferrovia_node::{Backend, DatagramConfig, Node};

pub const WAIT: Duration = Duration::from_secs(30);

/// `n` ranks on `backend`, each running `body` with its rank and its
/// datagrams (opened with `cfg`); panics if any rank fails.
pub fn job<R: Send + 'static>(
    backend: Backend,
    n: usize,
    cfg: DatagramConfig,
    body: impl Fn(usize, &mut Node, &mut Datagrams) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    let dir = std::env::temp_dir();
    let port_file: PathBuf = dir.join(format!(
        "ferrovia-dgram-{}-{:?}",
        std::process::id(),
        Instant::now()
    ));
    let _ = std::fs::remove_file(&port_file);
    let ranks: Vec<_> = (0..n)
        .map(|rank| {
            let port_file = port_file.clone();
            let body = body.clone();
            thread::spawn(move || {
                let addr = if rank == 0 {
                    "127.0.0.1:0".to_owned()
                } else {
                    let start = Instant::now();
                    loop {
                        if let Ok(p) = std::fs::read_to_string(&port_file)
                            && let Ok(p) = p.trim().parse::<u16>()
                        {
                            break format!("127.0.0.1:{p}");
                        }
                        assert!(start.elapsed() < WAIT, "rank 0 never reported its port");
                        thread::sleep(Duration::from_millis(10));
                    }
                };
                let mut b = Node::builder(rank, n, addr)
                    .token("datagram-tests")
                    .backend(backend)
                    .bootstrap_timeout(WAIT);
                if rank == 0 {
                    b = b.report_port_to(&port_file);
                }
                let mut node = b
                    .build()
                    .unwrap_or_else(|e| panic!("rank {rank} on {backend}: {e}"));
                let mut d = node
                    .open_datagrams_with(cfg, WAIT)
                    .unwrap_or_else(|e| panic!("rank {rank}: open datagrams: {e}"));
                let r = body(rank, &mut node, &mut d);
                // Nobody closes before everybody is done.
                barrier(&mut node);
                r
            })
        })
        .collect();
    let out = ranks
        .into_iter()
        .map(|h| h.join().expect("a rank panicked"))
        .collect();
    let _ = std::fs::remove_file(&port_file);
    out
}

/// Every rank of `node`'s job meets.
pub fn barrier(node: &mut Node) {
    use ferrovia_node::NodeScope;
    let all: Vec<usize> = (0..node.world_size()).collect();
    node.scope(|s| s.barrier(&all, WAIT))
        .unwrap_or_else(|e| panic!("rank {}: barrier: {e}", node.rank()));
}

/// Ranks 1.. each send `per` datagrams of their own to rank 0, which
/// takes them all, each named and whole (matched by the sequence number
/// in its first 4 bytes, so arrival order does not matter); then the
/// size limit and an empty message refused on every rank, and a message
/// at the limit taken into a small buffer, cut and said so.
pub fn many_to_one(backend: Backend, n: usize, per: usize) -> usize {
    let out = job(
        backend,
        n,
        DatagramConfig::default(),
        move |rank, node, d| {
            let max = d.max_message();
            assert!(max >= 256, "limit {max}");
            assert_eq!(d.peers(), n);
            if rank == 0 {
                let mut seen = vec![vec![false; per]; n];
                let mut buf = vec![0u8; max];
                for _ in 0..(n - 1) * per {
                    let g = d
                        .recv(&mut buf, WAIT)
                        .unwrap()
                        .expect("a datagram within the wait");
                    let from = g.from();
                    assert!((1..n).contains(&from), "from {from}");
                    assert!(!g.truncated());
                    let i = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
                    assert_eq!(
                        &buf[..g.len()],
                        &pattern(from, i, max)[..],
                        "rank {from}'s message {i}"
                    );
                    assert!(!seen[from][i], "rank {from}'s message {i} twice");
                    seen[from][i] = true;
                }
                assert!(
                    d.recv(&mut buf, std::time::Duration::from_millis(200))
                        .unwrap()
                        .is_none()
                );
            } else {
                for i in 0..per {
                    d.send_to(0, &pattern(rank, i, max), WAIT).unwrap();
                }
            }
            barrier(node);
            // The limit and an empty message are refused before sending.
            let e = d.send_to(0, &vec![0u8; max + 1], WAIT).unwrap_err();
            assert!(
                matches!(e, ferrovia_channel::TransportError::DatagramTooLong { .. }),
                "{e}"
            );
            assert!(d.send_to(0, &[], WAIT).is_err());
            if rank == 1 {
                d.send_to(0, &vec![7u8; max], WAIT).unwrap();
            }
            if rank == 0 {
                let mut small = [0u8; 10];
                let g = d
                    .recv(&mut small, WAIT)
                    .unwrap()
                    .expect("the message at the limit");
                assert_eq!(
                    (g.from(), g.len(), g.copied(), g.truncated()),
                    (1, max, 10, true)
                );
                assert_eq!(small, [7u8; 10]);
            }
            max
        },
    );
    out[0]
}

/// Message `i` of `rank`: its sequence number, then bytes of its own, of a
/// length that varies up to the limit.
pub fn pattern(rank: usize, i: usize, max: usize) -> Vec<u8> {
    let len = 4 + (rank * 97 + i * 31) % (max - 3);
    let mut m: Vec<u8> = (0..len)
        .map(|b| (b as u8) ^ (rank as u8) ^ (i as u8))
        .collect();
    m[..4].copy_from_slice(&(i as u32).to_le_bytes());
    m
}
