//! The rendezvous: every rank sends rank 0 what each peer needs from it,
//! once, and gets back what each peer made for it. O(n) connections, one
//! per rank, all to rank 0; the job token is checked on every one; a bad
//! connection is refused without disturbing the others.

use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam::channel;

use crate::error::BootstrapError;
use crate::wire::{Msg, io, read_msg, write_msg};

/// Who this rank is and whom to meet.
#[derive(Debug, Clone)]
pub struct RendezvousConfig {
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// `host:port` where rank 0 listens.
    pub addr: String,
    /// The job token.
    pub token: String,
    /// How long to wait for everyone.
    pub timeout: Duration,
}

/// The open connections after the exchange, for the final "ready" round.
#[derive(Debug)]
pub struct Session {
    streams: Vec<(usize, TcpStream)>,
    root: bool,
    timeout: Duration,
}

/// Exchanges `blobs` (`blobs[j]` for rank `j`) with every rank; returns
/// what every rank made for this one.
pub fn exchange(
    cfg: &RendezvousConfig,
    blobs: Vec<Vec<u8>>,
) -> Result<(Session, Vec<Vec<u8>>), BootstrapError> {
    if blobs.len() != cfg.world_size {
        return Err(BootstrapError::Protocol(format!(
            "{} blobs for a world of {}",
            blobs.len(),
            cfg.world_size
        )));
    }
    if cfg.rank == 0 {
        root(cfg, blobs)
    } else {
        member(cfg, blobs)
    }
}

fn port_of(addr: &str) -> Result<u16, BootstrapError> {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .ok_or_else(|| BootstrapError::MalformedVar {
            name: "rendezvous".into(),
            value: addr.to_owned(),
            reason: "expected host:port".into(),
        })
}

/// Constant-time comparison, so the token cannot be guessed byte by byte.
fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

struct CheckIn {
    rank: usize,
    stream: TcpStream,
    blobs: Vec<Vec<u8>>,
}

fn root(
    cfg: &RendezvousConfig,
    own: Vec<Vec<u8>>,
) -> Result<(Session, Vec<Vec<u8>>), BootstrapError> {
    let start = Instant::now();
    let port = port_of(&cfg.addr)?;
    let listener = TcpListener::bind(("0.0.0.0", port))
        .map_err(|e| io(&format!("listen on port {port}"), e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| io("listen", e))?;
    let (tx, rx) = channel::unbounded::<(TcpStream, Result<Msg, BootstrapError>)>();
    let mut table: Vec<Option<CheckIn>> = (0..cfg.world_size).map(|_| None).collect();
    let mut arrived = 1;
    while arrived < cfg.world_size {
        let left = cfg.timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            let missing: Vec<usize> = (1..cfg.world_size)
                .filter(|&r| table[r].is_none())
                .collect();
            // Tell those who came, so they fail now rather than at their own deadline.
            for c in table.iter_mut().flatten() {
                let _ = write_msg(
                    &mut c.stream,
                    &Msg::Reject {
                        reason: format!("rank(s) {missing:?} never checked in"),
                    },
                );
            }
            return Err(BootstrapError::MissingRanks {
                missing,
                after: start.elapsed(),
            });
        }
        match listener.accept() {
            Ok((stream, _)) => {
                // Each connection reads its hello on its own thread, so a
                // silent stranger cannot hold up the ranks behind it.
                let tx = tx.clone();
                thread::spawn(move || {
                    let mut stream = stream;
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_read_timeout(Some(left));
                    let msg = read_msg(&mut stream);
                    let _ = tx.send((stream, msg));
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(io("accept", e)),
        }
        while let Ok((mut stream, msg)) = rx.recv_timeout(Duration::from_millis(5)) {
            match vet(cfg, &table, msg) {
                Ok((rank, blobs)) => {
                    table[rank] = Some(CheckIn {
                        rank,
                        stream,
                        blobs,
                    });
                    arrived += 1;
                    log::debug!(
                        "rendezvous: rank {rank} checked in ({arrived}/{})",
                        cfg.world_size
                    );
                }
                Err(reason) => {
                    log::warn!("rendezvous: refused a connection: {reason}");
                    let _ = write_msg(&mut stream, &Msg::Reject { reason });
                }
            }
        }
    }
    let mut checked: Vec<CheckIn> = table.into_iter().flatten().collect();
    let column = |r: usize, checked: &[CheckIn]| -> Vec<Vec<u8>> {
        std::iter::once(own[r].clone())
            .chain(checked.iter().map(|c| c.blobs[r].clone()))
            .collect()
    };
    for i in 0..checked.len() {
        let blobs = column(checked[i].rank, &checked);
        write_msg(&mut checked[i].stream, &Msg::Table { blobs })?;
    }
    let mine = column(0, &checked);
    let streams = checked.into_iter().map(|c| (c.rank, c.stream)).collect();
    Ok((
        Session {
            streams,
            root: true,
            timeout: cfg.timeout,
        },
        mine,
    ))
}

/// Checks a hello; `Err` is the reason sent back to the stranger.
fn vet(
    cfg: &RendezvousConfig,
    table: &[Option<CheckIn>],
    msg: Result<Msg, BootstrapError>,
) -> Result<(usize, Vec<Vec<u8>>), String> {
    let (token, rank, world_size, blobs) = match msg {
        Ok(Msg::Hello {
            token,
            rank,
            world_size,
            blobs,
        }) => (token, rank as usize, world_size as usize, blobs),
        Ok(other) => return Err(format!("expected a hello, got {other:?}")),
        Err(e) => return Err(e.to_string()),
    };
    if !same_token(&token, &cfg.token) {
        return Err("wrong job token".into());
    }
    if world_size != cfg.world_size {
        return Err(format!(
            "world size {world_size} differs from rank 0's {}",
            cfg.world_size
        ));
    }
    if rank == 0 || rank >= cfg.world_size {
        return Err(format!("rank {rank} is out of range 1..{}", cfg.world_size));
    }
    if table[rank].is_some() {
        return Err(format!("rank {rank} already checked in"));
    }
    if blobs.len() != cfg.world_size {
        return Err(format!(
            "{} blobs for a world of {}",
            blobs.len(),
            cfg.world_size
        ));
    }
    Ok((rank, blobs))
}

fn connect(addr: &str, deadline: Instant) -> Result<TcpStream, BootstrapError> {
    let start = Instant::now();
    let mut last = String::from("no address");
    loop {
        match addr.to_socket_addrs() {
            Ok(addrs) => {
                for a in addrs {
                    let left = deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_millis(10));
                    match TcpStream::connect_timeout(&a, left.min(Duration::from_secs(2))) {
                        Ok(s) => return Ok(s),
                        Err(e) => last = e.to_string(),
                    }
                }
            }
            Err(e) => last = e.to_string(),
        }
        if Instant::now() >= deadline {
            return Err(BootstrapError::Unreachable {
                addr: addr.to_owned(),
                after: start.elapsed(),
                last,
            });
        }
        thread::sleep(Duration::from_millis(100)); // rank 0 may not be up yet
    }
}

fn member(
    cfg: &RendezvousConfig,
    blobs: Vec<Vec<u8>>,
) -> Result<(Session, Vec<Vec<u8>>), BootstrapError> {
    let deadline = Instant::now() + cfg.timeout;
    let mut stream = connect(&cfg.addr, deadline)?;
    let hello = Msg::Hello {
        token: cfg.token.clone(),
        rank: cfg.rank as u32,
        world_size: cfg.world_size as u32,
        blobs,
    };
    write_msg(&mut stream, &hello)?;
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    stream
        .set_read_timeout(Some(left))
        .map_err(|e| io("configure socket", e))?;
    match read_msg(&mut stream)? {
        Msg::Table { blobs } if blobs.len() == cfg.world_size => Ok((
            Session {
                streams: vec![(0, stream)],
                root: false,
                timeout: cfg.timeout,
            },
            blobs,
        )),
        Msg::Reject { reason } => Err(BootstrapError::Rejected {
            rank: cfg.rank,
            reason,
        }),
        other => Err(BootstrapError::Protocol(format!(
            "expected the table, got {other:?}"
        ))),
    }
}

impl Session {
    /// The last round: every rank says it is ready (its queue pairs are
    /// connected), and nobody returns before everybody is.
    pub fn ready(mut self) -> Result<(), BootstrapError> {
        let deadline = Instant::now() + self.timeout;
        for (_, s) in &mut self.streams {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            s.set_read_timeout(Some(left))
                .map_err(|e| io("configure socket", e))?;
        }
        if self.root {
            for (rank, s) in &mut self.streams {
                match read_msg(s) {
                    Ok(Msg::Ready) => {}
                    Ok(other) => {
                        return Err(BootstrapError::Protocol(format!(
                            "rank {rank}: expected ready, got {other:?}"
                        )));
                    }
                    Err(e) => {
                        return Err(BootstrapError::Protocol(format!(
                            "rank {rank} did not report ready: {e}"
                        )));
                    }
                }
            }
            for (_, s) in &mut self.streams {
                write_msg(s, &Msg::Go)?;
            }
            Ok(())
        } else {
            let (_, s) = &mut self.streams[0];
            write_msg(s, &Msg::Ready)?;
            match read_msg(s)? {
                Msg::Go => Ok(()),
                Msg::Reject { reason } => Err(BootstrapError::Rejected { rank: 0, reason }),
                other => Err(BootstrapError::Protocol(format!(
                    "expected go, got {other:?}"
                ))),
            }
        }
    }
}
