//! What a rank process holds, read from /proc: its threads, open files,
//! resident memory, and the TCP ports it listens on.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A sample of a process's resources.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cost {
    pub(crate) threads: u64,
    pub(crate) fds: u64,
    /// Of `fds`, the TCP connections (sockets in any state but listen).
    pub(crate) tcp: u64,
    /// `fds` less `tcp`, in the same sample.
    pub(crate) other_files: u64,
    pub(crate) rss_kib: u64,
}

impl Cost {
    /// `None` once the process is gone.
    pub(crate) fn of(pid: u32) -> Option<Cost> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
        let tcp = connections(pid);
        Some(Cost {
            threads: field("Threads:"),
            fds,
            tcp,
            other_files: fds.saturating_sub(tcp),
            rss_kib: field("VmRSS:"),
        })
    }
}

/// The socket inodes process `pid` holds.
fn socket_inodes(pid: u32) -> HashSet<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|t| {
            let t = t.to_string_lossy().into_owned();
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

/// How many TCP connections (sockets in any state but listen) process
/// `pid` holds.
fn connections(pid: u32) -> u64 {
    let mine = socket_inodes(pid);
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() >= 10
                && f[3] != "0A"
                && f[9].parse::<u64>().is_ok_and(|inode| mine.contains(&inode))
            {
                n += 1;
            }
        }
    }
    n
}

/// Every TCP address process `pid` listens on.
pub(crate) fn listening(pid: u32) -> Vec<SocketAddr> {
    let mine = socket_inodes(pid);
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" {
                continue;
            }
            if let (Ok(inode), Some(a)) = (f[9].parse::<u64>(), parse_addr(f[1]))
                && mine.contains(&inode)
            {
                out.push(a);
            }
        }
    }
    out.sort();
    out
}

/// The kernel's name of a TCP state (`/proc/net/tcp`'s `st` column).
fn tcp_state(hex: &str) -> &'static str {
    match hex {
        "01" => "established",
        "02" => "syn-sent",
        "03" => "syn-recv",
        "04" => "fin-wait1",
        "05" => "fin-wait2",
        "06" => "time-wait",
        "07" => "close",
        "08" => "close-wait",
        "09" => "last-ack",
        "0A" => "listen",
        "0B" => "closing",
        _ => "tcp ?",
    }
}

/// What process `pid`'s open files are, counted by kind: TCP sockets by
/// state, other sockets, pipes, eventfds, epoll and timer fds, files. A
/// leak shows as one kind that grows (CLOSE_WAIT sockets: a peer closed
/// and this side never did).
pub(crate) fn fd_kinds(pid: u32) -> std::collections::BTreeMap<String, u64> {
    let mut tcp = std::collections::HashMap::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if let (Some(st), Some(Ok(inode))) = (f.get(3), f.get(9).map(|i| i.parse::<u64>())) {
                tcp.insert(inode, tcp_state(st));
            }
        }
    }
    let mut kinds = std::collections::BTreeMap::new();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return kinds;
    };
    for fd in fds.flatten() {
        let Ok(target) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let t = target.to_string_lossy();
        let kind = if let Some(inode) = t
            .strip_prefix("socket:[")
            .and_then(|s| s.strip_suffix(']'))
            .and_then(|s| s.parse::<u64>().ok())
        {
            tcp.get(&inode)
                .map_or_else(|| "socket (not tcp)".to_owned(), |s| format!("tcp {s}"))
        } else if t.starts_with("pipe:") {
            "pipe".to_owned()
        } else if let Some(a) = t.strip_prefix("anon_inode:") {
            a.trim_matches(|c| c == '[' || c == ']').to_owned()
        } else {
            "file".to_owned()
        };
        *kinds.entry(kind).or_insert(0) += 1;
    }
    kinds
}
