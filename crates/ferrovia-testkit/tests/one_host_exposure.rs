//! Reliability issue 22, part 1: a job whose ranks are all on this host
//! listens on no address beyond loopback, whatever `UCX_TLS` says, and
//! with the default transports it survives UCX's tcp magic number followed
//! by 4 KiB of 0xff on every port it listens on (before: UCX's tcp
//! endpoint asserted, `hdr->length <= rx_seg_size`, and rank 0 died of
//! SIGABRT; a one-host job also listened on the external address).
//!
//! What a rank listens on is read from `/proc/net/tcp` and `tcp6` (its
//! sockets' inodes from `/proc/PID/fd`); no traffic goes to a
//! non-loopback address.
#![cfg(feature = "ucx")]

mod suite;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::process::Child;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use suite::{Job, RANK_BIN};

/// UCX's tcp transport's magic number (`UCT_TCP_MAGIC_NUMBER`), as it
/// goes on the wire (little-endian).
const UCX_TCP_MAGIC: u64 = 0xCAFE_BABE_1234_5678;

/// The socket inodes process `pid` holds.
fn socket_inodes(pid: u32) -> HashSet<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|target| {
            let t = target.to_string_lossy().into_owned();
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// An address of `/proc/net/tcp{,6}` (hex words in host order).
fn parse_addr(hex: &str) -> Option<SocketAddr> {
    let (ip, port) = hex.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(
            u32::from_str_radix(ip, 16).ok()?.to_le_bytes(),
        )),
        32 => {
            let mut b = [0u8; 16];
            for w in 0..4 {
                let word = u32::from_str_radix(&ip[w * 8..w * 8 + 8], 16).ok()?;
                b[w * 4..w * 4 + 4].copy_from_slice(&word.to_le_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Every address process `pid` listens on (TCP).
fn listening(pid: u32) -> Vec<SocketAddr> {
    let mine = socket_inodes(pid);
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" {
                continue; // not LISTEN
            }
            let Ok(inode) = f[9].parse::<u64>() else {
                continue;
            };
            if mine.contains(&inode)
                && let Some(a) = parse_addr(f[1])
            {
                out.push(a);
            }
        }
    }
    out.sort();
    out
}

/// A 2-rank barrier loop with `env`, both ranks in the loop.
fn start(env: &'static [(&'static str, &'static str)]) -> (Job, Vec<Child>) {
    let job = Job::new(RANK_BIN, 2, env);
    // 1 s barriers: a dead rank 0 fails rank 1's next barrier quickly.
    let args = ["barrier-loop", "100000000", "1000"];
    let mut ranks: Vec<Child> = (0..2)
        .map(|r| {
            let mut c = job.command(r, &args, &[]);
            c.env_remove("UCX_TLS").env_remove("UCX_NET_DEVICES");
            for (k, v) in env {
                c.env(k, v);
            }
            let child = c.spawn().expect("spawn ferrovia-rank");
            if r == 0 {
                job.wait_for_port();
            }
            child
        })
        .collect();
    let (tx, rx) = mpsc::channel();
    for child in &mut ranks {
        let out = child.stdout.take().unwrap();
        let tx = tx.clone();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if line.contains("in barrier loop") {
                    let _ = tx.send(());
                }
            }
        });
    }
    for _ in 0..2 {
        rx.recv_timeout(Duration::from_secs(60))
            .expect("both ranks enter the loop");
    }
    (job, ranks)
}

/// Whether each rank was still running (then it is killed), else how it
/// ended.
fn stop(mut ranks: Vec<Child>) -> Vec<String> {
    ranks
        .iter_mut()
        .map(|c| {
            let ended = c.try_wait().unwrap();
            let _ = c.kill();
            let _ = c.wait();
            match ended {
                None => "running".to_owned(),
                Some(status) => {
                    let mut err = String::new();
                    if let Some(mut e) = c.stderr.take() {
                        use std::io::Read;
                        let _ = e.read_to_string(&mut err);
                    }
                    format!("ended: {status}: {err}")
                }
            }
        })
        .collect()
}

fn nothing_listens_beyond_loopback(env: &'static [(&'static str, &'static str)]) {
    let (_job, ranks) = start(env);
    for (r, child) in ranks.iter().enumerate() {
        let addrs = listening(child.id());
        println!("{env:?}: rank {r} listens on {addrs:?}");
        assert!(!addrs.is_empty(), "rank {r}: its control port at least");
        for a in &addrs {
            assert!(a.ip().is_loopback(), "rank {r} listens on {a} ({env:?})");
        }
    }
    assert_eq!(stop(ranks), ["running", "running"]);
}

#[test]
fn a_one_host_job_listens_on_loopback_only_with_the_default_transports() {
    nothing_listens_beyond_loopback(&[("FERROVIA_BACKEND", "ucx")]);
}

#[test]
fn a_one_host_job_listens_on_loopback_only_with_ucx_tcp() {
    nothing_listens_beyond_loopback(&[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "tcp")]);
}

#[test]
fn a_one_host_job_listens_on_loopback_only_with_every_ucx_transport() {
    nothing_listens_beyond_loopback(&[("FERROVIA_BACKEND", "ucx"), ("UCX_TLS", "all")]);
}

/// The attack on every port a rank listens on: the job goes on.
#[test]
fn the_tcp_magic_attack_on_every_port_does_not_kill_a_one_host_job() {
    let (_job, ranks) = start(&[("FERROVIA_BACKEND", "ucx")]);
    let mut attacked = 0;
    for child in &ranks {
        for a in listening(child.id()) {
            assert!(a.ip().is_loopback(), "{a}");
            let Ok(mut s) = TcpStream::connect_timeout(&a, Duration::from_secs(1)) else {
                continue;
            };
            let mut bytes = UCX_TCP_MAGIC.to_le_bytes().to_vec();
            bytes.extend(std::iter::repeat_n(0xff, 4096));
            let _ = s.write_all(&bytes);
            attacked += 1;
        }
    }
    assert!(attacked >= 2, "every rank's control port at least");
    // Barriers time out after 1 s: a dead rank 0 would fail rank 1 by then.
    thread::sleep(Duration::from_secs(3));
    assert_eq!(
        stop(ranks),
        ["running", "running"],
        "both ranks survived {attacked} attacked ports and kept passing barriers"
    );
}
