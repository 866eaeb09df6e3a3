//! The rendezvous: every rank sends rank 0 what each peer needs from it,
//! once, and gets back what each peer made for it. O(n) connections, one
//! per rank, all to rank 0. A rank shows the job token first (`Join`) and
//! sends its blobs only once welcomed; rank 0's side, with its bounds on
//! connections, bytes and time, is in [`root`].

mod root;

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use crate::bootstrap::address::{self, HostPort};
use crate::bootstrap::launcher::DEFAULT_PORT;
use crate::bootstrap::wire::{
    MAX_BODY, MAX_JOIN, MAX_REASON, Msg, io, read_msg, truncate, write_msg,
};
use crate::error::BootstrapError;

/// Who this rank is and whom to meet: [`RendezvousConfig::new`], then
/// [`RendezvousConfig::timeout`] to change the wait.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RendezvousConfig {
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// `host:port` where rank 0 listens (rank 0 listens on exactly that
    /// address when it is an IP address; port 0 lets the OS choose, see
    /// [`Rendezvous::local_addr`]).
    pub addr: String,
    /// The job token.
    pub token: String,
    /// How long to wait for everyone.
    pub timeout: Duration,
}

impl RendezvousConfig {
    /// Rank `rank` of `world_size`, meeting at `addr` (`host:port`) with
    /// the job token `token`, waiting up to 60 s for everyone (as a
    /// `Node` does by default).
    pub fn new(
        rank: usize,
        world_size: usize,
        addr: impl Into<String>,
        token: impl Into<String>,
    ) -> RendezvousConfig {
        RendezvousConfig {
            rank,
            world_size,
            addr: addr.into(),
            token: token.into(),
            timeout: Duration::from_secs(60),
        }
    }

    /// Waits up to `timeout` for everyone.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// The open connections after the exchange, for the final "ready" round.
#[derive(Debug)]
pub struct Session {
    streams: Vec<(usize, TcpStream)>,
    root: bool,
    timeout: Duration,
}

/// Rank 0's rendezvous, listening: bind it first to learn the port (when
/// the configuration asked for port 0), then [`Rendezvous::exchange`].
#[derive(Debug)]
pub struct Rendezvous {
    listener: TcpListener,
    local: SocketAddr,
}

impl Rendezvous {
    /// Listens where `cfg.addr` says (see [`RendezvousConfig::addr`]).
    pub fn bind(cfg: &RendezvousConfig) -> Result<Rendezvous, BootstrapError> {
        let hp = address::parse("rendezvous address", &cfg.addr, DEFAULT_PORT)?;
        let at = address::listen_addr(&hp);
        let listener = TcpListener::bind(at).map_err(|e| io(&format!("listen on {at}"), e))?;
        let local = listener.local_addr().map_err(|e| io("listen", e))?;
        tracing::debug!("rendezvous: rank 0 listens on {local} (configured {hp})");
        Ok(Rendezvous { listener, local })
    }

    /// A rendezvous served on `listener` (rank 0's control port, for a
    /// rail's exchange: the ranks already know where it listens).
    pub(crate) fn serving(listener: TcpListener) -> Result<Rendezvous, BootstrapError> {
        let local = listener.local_addr().map_err(|e| io("listen", e))?;
        Ok(Rendezvous { listener, local })
    }

    /// Where it listens (with the port the OS chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Rank 0's side of [`exchange`].
    pub fn exchange(
        self,
        cfg: &RendezvousConfig,
        blobs: Vec<Vec<u8>>,
    ) -> Result<(Session, Vec<Vec<u8>>), BootstrapError> {
        check_blobs(cfg, &blobs)?;
        let _span = tracing::debug_span!(
            "rendezvous",
            rank = 0,
            world_size = cfg.world_size,
            listening = %self.local
        )
        .entered();
        let started = Instant::now();
        let (streams, mine) = root::serve(self.listener, cfg, blobs)?;
        tracing::debug!(
            took_us = started.elapsed().as_micros() as u64,
            "every rank checked in"
        );
        Ok((
            Session {
                streams,
                root: true,
                timeout: cfg.timeout,
            },
            mine,
        ))
    }
}

/// Exchanges `blobs` (`blobs[j]` for rank `j`) with every rank; returns
/// what every rank made for this one.
pub fn exchange(
    cfg: &RendezvousConfig,
    blobs: Vec<Vec<u8>>,
) -> Result<(Session, Vec<Vec<u8>>), BootstrapError> {
    check_blobs(cfg, &blobs)?;
    if cfg.rank == 0 {
        Rendezvous::bind(cfg)?.exchange(cfg, blobs)
    } else {
        let _span = tracing::debug_span!(
            "rendezvous",
            rank = cfg.rank,
            world_size = cfg.world_size,
            at = %cfg.addr
        )
        .entered();
        let started = Instant::now();
        let r = member(cfg, blobs);
        if r.is_ok() {
            tracing::debug!(
                took_us = started.elapsed().as_micros() as u64,
                "met every rank through rank 0"
            );
        }
        r
    }
}

fn check_blobs(cfg: &RendezvousConfig, blobs: &[Vec<u8>]) -> Result<(), BootstrapError> {
    if blobs.len() != cfg.world_size {
        return Err(BootstrapError::Protocol(format!(
            "{} blobs for a world of {}",
            blobs.len(),
            cfg.world_size
        )));
    }
    crate::bootstrap::token::check("job token", &cfg.token)
}

/// Whether an I/O error is a socket timeout (`EAGAIN` on a blocking socket
/// with a timeout set).
fn timed_out(e: &BootstrapError) -> bool {
    matches!(e, BootstrapError::Io { source, .. }
        if matches!(source.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
}

/// `e`, as a timeout that says what was awaited when it is one.
pub(crate) fn naming_timeout(e: BootstrapError, what: &str, since: Instant) -> BootstrapError {
    if timed_out(&e) {
        BootstrapError::TimedOut {
            what: what.to_owned(),
            after: since.elapsed(),
        }
    } else {
        e
    }
}

fn connect(hp: &HostPort, deadline: Instant) -> Result<TcpStream, BootstrapError> {
    let start = Instant::now();
    let addr = hp.to_string();
    let mut last = String::from("no address");
    loop {
        match (hp.host.as_str(), hp.port).to_socket_addrs() {
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
                addr,
                after: start.elapsed(),
                last,
            });
        }
        thread::sleep(Duration::from_millis(100)); // rank 0 may not be up yet
    }
}

/// How one attempt to check in ended, short of the table.
enum Attempt {
    /// Rank 0 closed the connection without an answer (it sheds
    /// connections past its bounds): try again.
    Dropped(BootstrapError),
    /// A final answer.
    Failed(BootstrapError),
}

fn member(
    cfg: &RendezvousConfig,
    blobs: Vec<Vec<u8>>,
) -> Result<(Session, Vec<Vec<u8>>), BootstrapError> {
    let start = Instant::now();
    let deadline = start + cfg.timeout;
    let hp = address::parse("rendezvous address", &cfg.addr, DEFAULT_PORT)?;
    if hp.port == 0 {
        return Err(BootstrapError::MalformedVar {
            name: "rendezvous address".into(),
            value: cfg.addr.clone(),
            reason: "port 0 is for rank 0 only (the OS picks its port); the other ranks need the port it picked".into(),
        });
    }
    loop {
        let mut stream = connect(&hp, deadline)?;
        match check_in(&mut stream, cfg, &blobs, deadline) {
            Ok(table) => {
                return Ok((
                    Session {
                        streams: vec![(0, stream)],
                        root: false,
                        timeout: cfg.timeout,
                    },
                    table,
                ));
            }
            Err(Attempt::Dropped(e)) if Instant::now() + Duration::from_millis(100) < deadline => {
                tracing::debug!(
                    "rendezvous: rank 0 at {hp} dropped rank {}: {e}; again",
                    cfg.rank
                );
                thread::sleep(Duration::from_millis(100));
            }
            Err(Attempt::Dropped(e)) => {
                return Err(BootstrapError::TimedOut {
                    what: format!("rank 0 at {hp} to take rank {}'s check-in ({e})", cfg.rank),
                    after: start.elapsed(),
                });
            }
            Err(Attempt::Failed(e)) => return Err(e),
        }
    }
}

/// Join, blobs, table, on one connection.
fn check_in(
    stream: &mut TcpStream,
    cfg: &RendezvousConfig,
    blobs: &[Vec<u8>],
    deadline: Instant,
) -> Result<Vec<Vec<u8>>, Attempt> {
    let start = Instant::now();
    let left = deadline
        .saturating_duration_since(start)
        .max(Duration::from_millis(1));
    stream
        .set_read_timeout(Some(left))
        .and_then(|()| stream.set_write_timeout(Some(left)))
        .map_err(|e| Attempt::Failed(io("configure socket", e)))?;
    let join = Msg::Join {
        token: cfg.token.clone(),
        rank: cfg.rank as u32,
        world_size: cfg.world_size as u32,
    };
    write_msg(stream, &join).map_err(Attempt::Dropped)?;
    let answer = |stream: &mut TcpStream, max: u32, what: &str| match read_msg(stream, max) {
        Ok(Msg::Reject { reason }) => Err(Attempt::Failed(BootstrapError::Rejected {
            rank: cfg.rank,
            reason: truncate(&reason, MAX_REASON).to_owned(),
        })),
        Ok(m) => Ok(m),
        Err(e) if timed_out(&e) => Err(Attempt::Failed(naming_timeout(e, what, start))),
        Err(e @ BootstrapError::Io { .. }) => Err(Attempt::Dropped(e)),
        Err(e) => Err(Attempt::Failed(e)),
    };
    match answer(stream, MAX_JOIN, "rank 0's answer to the check-in")? {
        Msg::Welcome => {}
        other => {
            return Err(Attempt::Failed(BootstrapError::Protocol(format!(
                "expected a welcome, got {}",
                other.kind()
            ))));
        }
    }
    let msg = Msg::Blobs {
        blobs: blobs.to_vec(),
    };
    write_msg(stream, &msg).map_err(Attempt::Dropped)?;
    match answer(
        stream,
        MAX_BODY,
        "the table from rank 0 (every rank to check in)",
    )? {
        Msg::Table { blobs } if blobs.len() == cfg.world_size => Ok(blobs),
        other => Err(Attempt::Failed(BootstrapError::Protocol(format!(
            "expected the table of {} ranks, got {}",
            cfg.world_size,
            other.kind()
        )))),
    }
}

impl Session {
    /// [`Session::ready`] by `deadline` rather than within the exchange's
    /// whole timeout again.
    pub(crate) fn ready_by(mut self, deadline: Instant) -> Result<(), BootstrapError> {
        self.timeout = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        self.ready()
    }

    /// The last round: every rank says it is ready (its queue pairs are
    /// connected), and nobody returns before everybody is.
    pub fn ready(mut self) -> Result<(), BootstrapError> {
        let start = Instant::now();
        let deadline = start + self.timeout;
        for (_, s) in &mut self.streams {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            s.set_read_timeout(Some(left))
                .and_then(|()| s.set_write_timeout(Some(left)))
                .map_err(|e| io("configure socket", e))?;
        }
        if self.root {
            for (rank, s) in &mut self.streams {
                let what = format!("rank {rank} to report ready");
                match read_msg(s, MAX_JOIN).map_err(|e| naming_timeout(e, &what, start)) {
                    Ok(Msg::Ready) => {}
                    Ok(other) => {
                        return Err(BootstrapError::Protocol(format!(
                            "rank {rank}: expected ready, got {}",
                            other.kind()
                        )));
                    }
                    Err(e) => {
                        return Err(BootstrapError::Protocol(format!(
                            "rank {rank} did not report ready: {e}"
                        )));
                    }
                }
            }
            for (rank, s) in &mut self.streams {
                write_msg(s, &Msg::Go).map_err(|e| {
                    BootstrapError::Protocol(format!("rank {rank} was not told to go: {e}"))
                })?;
            }
            Ok(())
        } else {
            let (_, s) = &mut self.streams[0];
            write_msg(s, &Msg::Ready)?;
            let what = "rank 0's go (every rank connected)";
            match read_msg(s, MAX_JOIN).map_err(|e| naming_timeout(e, what, start))? {
                Msg::Go => Ok(()),
                Msg::Reject { reason } => Err(BootstrapError::Rejected {
                    rank: 0,
                    reason: truncate(&reason, MAX_REASON).to_owned(),
                }),
                other => Err(BootstrapError::Protocol(format!(
                    "expected go, got {}",
                    other.kind()
                ))),
            }
        }
    }
}
