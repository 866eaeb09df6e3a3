//! Rank 0's side of the rendezvous, bounded whatever connects:
//!
//! - threads: none; the calling thread serves every connection, without
//!   blocking, turning every millisecond or so;
//! - connections: at most [`MAX_STRANGERS`] that have not shown the job
//!   token, plus at most as many refused ones lingering to deliver their
//!   refusal, plus one per rank; a new connection past the bound evicts the
//!   oldest stranger;
//! - bytes: at most [`MAX_JOIN`] read from a connection before its token is
//!   checked (a longer first message is refused from its header); a ranks'
//!   blobs, at most [`MAX_BODY`], only once its token was accepted, and at
//!   most 64 KiB discarded from a refused one;
//! - time: [`JOIN_WINDOW`] for a connection to show the token, 1 s for a
//!   refused one to go, the bootstrap timeout for the whole rendezvous;
//!   nothing is written without a deadline, and refusals are small enough
//!   that writing them never waits.
//!
//! Past a bound a connection is refused or dropped with a logged reason:
//! the first few one by one, then counted, with a sum at the end.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use super::{RendezvousConfig, naming_timeout};
use crate::bootstrap::wire::{
    HEADER_LEN, MAX_BODY, MAX_JOIN, MAX_REASON, Msg, body_len, decode, frame, io, truncate,
};
use crate::error::BootstrapError;

/// Connections that have not shown the job token, at once.
pub(crate) const MAX_STRANGERS: usize = 64;
/// How long a connection has to show the job token.
pub(crate) const JOIN_WINDOW: Duration = Duration::from_secs(5);
/// How long a refused connection may stay to read its refusal.
const LINGER: Duration = Duration::from_secs(1);
/// What is read and dropped from a refused connection before it is closed.
const MAX_DISCARD: usize = 64 << 10;
/// Connections accepted per turn: a flood cannot evict a connection before
/// it was read at least once.
const ACCEPT_BURST: usize = MAX_STRANGERS / 4;
/// Bytes read from one connection per turn, so one cannot starve the rest.
const READ_BURST: usize = 1 << 20;
/// Refusals and drops logged one by one before they are only counted.
const LOGGED: usize = 8;
/// The pause of a turn in which nothing happened.
const TICK: Duration = Duration::from_millis(1);

/// A connection being read, one frame at a time.
struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    since: Instant,
    buf: Vec<u8>,
    /// The body length, once the header was read.
    body: Option<usize>,
}

enum Step {
    Pending,
    Frame(Msg),
    Closed,
    Failed(BootstrapError),
}

impl Conn {
    fn new(stream: TcpStream, peer: SocketAddr) -> Conn {
        Conn {
            stream,
            peer,
            since: Instant::now(),
            buf: Vec::with_capacity(HEADER_LEN),
            body: None,
        }
    }

    /// Reads what has arrived, up to one frame of at most `max` body bytes.
    fn pump(&mut self, max: u32) -> Step {
        let mut chunk = [0u8; 16 << 10];
        let mut budget = READ_BURST;
        loop {
            if self.body.is_none() && self.buf.len() == HEADER_LEN {
                match body_len(&self.buf, max) {
                    Ok(len) => {
                        self.body = Some(len);
                        // Only a welcomed rank may announce more than
                        // MAX_JOIN, and its length is held to `max`.
                        self.buf.reserve_exact(len);
                    }
                    Err(e) => return Step::Failed(e),
                }
            }
            let want = HEADER_LEN + self.body.unwrap_or(0);
            if self.body.is_some() && self.buf.len() == want {
                let msg = decode(&self.buf[HEADER_LEN..]);
                self.buf = Vec::with_capacity(HEADER_LEN);
                self.body = None;
                return msg.map_or_else(Step::Failed, Step::Frame);
            }
            if budget == 0 {
                return Step::Pending;
            }
            let n = (want - self.buf.len()).min(chunk.len()).min(budget);
            match self.stream.read(&mut chunk[..n]) {
                Ok(0) => return Step::Closed,
                Ok(k) => {
                    self.buf.extend_from_slice(&chunk[..k]);
                    budget -= k;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Pending,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Step::Failed(io("receive", e)),
            }
        }
    }

    /// Writes a small frame without waiting: true if it went out whole.
    fn send_now(&mut self, msg: &Msg) -> bool {
        frame(msg).is_ok_and(|f| matches!(self.stream.write(&f), Ok(n) if n == f.len()))
    }
}

/// A refused connection, left open briefly so the refusal is read before
/// the close (closing with unread input would reset it).
struct Closing {
    stream: TcpStream,
    until: Instant,
    discarded: usize,
}

impl Closing {
    /// False once it should be closed.
    fn linger(&mut self) -> bool {
        let mut sink = [0u8; 4096];
        loop {
            match self.stream.read(&mut sink) {
                Ok(0) => return false,
                Ok(k) => {
                    self.discarded += k;
                    if self.discarded > MAX_DISCARD {
                        return false;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Instant::now() < self.until,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }
}

/// A rank that checked in.
struct CheckIn {
    rank: usize,
    stream: TcpStream,
    blobs: Vec<Vec<u8>>,
}

/// Operator messages of one rendezvous: the first [`LOGGED`] refusals and
/// drops one by one, then only counted, summed up at the end.
#[derive(Default)]
struct Log {
    refused: usize,
    dropped: usize,
}

impl Log {
    fn refused(&mut self, peer: SocketAddr, reason: &str) {
        self.refused += 1;
        self.line("refused", peer, reason);
    }

    fn dropped(&mut self, peer: SocketAddr, why: &str) {
        self.dropped += 1;
        self.line("dropped", peer, why);
    }

    fn line(&self, what: &str, peer: SocketAddr, why: &str) {
        let why = truncate(why, MAX_REASON);
        if self.refused + self.dropped <= LOGGED {
            tracing::warn!("rendezvous: {what} a connection from {peer}: {why}");
        } else {
            tracing::debug!("rendezvous: {what} a connection from {peer}: {why}");
        }
    }

    fn summary(&self) {
        if self.refused + self.dropped > LOGGED {
            tracing::warn!(
                "rendezvous: refused {} and dropped {} connections in all (the first {LOGGED} logged)",
                self.refused,
                self.dropped
            );
        }
    }
}

/// Everything rank 0 holds while the ranks arrive.
struct Server<'a> {
    cfg: &'a RendezvousConfig,
    strangers: VecDeque<Conn>,
    /// Welcomed connections, waiting for their blobs, with their rank.
    joined: Vec<(usize, Conn)>,
    closing: VecDeque<Closing>,
    checked: Vec<Option<CheckIn>>,
    /// Ranks that are welcomed or checked in.
    claimed: Vec<bool>,
    log: Log,
    accept_failing: bool,
}

/// The ranks' connections, by rank, and what every rank made for rank 0.
pub(super) type Served = (Vec<(usize, TcpStream)>, Vec<Vec<u8>>);

/// Serves the rendezvous until every rank checked in and took its table.
pub(super) fn serve(
    listener: TcpListener,
    cfg: &RendezvousConfig,
    own: Vec<Vec<u8>>,
) -> Result<Served, BootstrapError> {
    let start = Instant::now();
    let deadline = start + cfg.timeout;
    listener
        .set_nonblocking(true)
        .map_err(|e| io("listen", e))?;
    let n = cfg.world_size;
    let mut s = Server {
        cfg,
        strangers: VecDeque::new(),
        joined: Vec::new(),
        closing: VecDeque::new(),
        checked: (0..n).map(|_| None).collect(),
        claimed: (0..n).map(|r| r == 0).collect(),
        log: Log::default(),
        accept_failing: false,
    };
    let mut arrived = 1;
    while arrived < n {
        if Instant::now() >= deadline {
            s.log.summary();
            return Err(s.missing(start));
        }
        let mut busy = s.read_strangers();
        let (read, checked) = s.read_joined();
        busy |= read;
        arrived += checked;
        busy |= s.accept(&listener);
        s.closing.retain_mut(Closing::linger);
        if !busy {
            thread::sleep(TICK);
        }
    }
    drop(listener);
    s.log.summary();
    let checked: Vec<CheckIn> = s.checked.into_iter().flatten().collect();
    let column = |r: usize| -> Vec<Vec<u8>> {
        std::iter::once(own[r].clone())
            .chain(checked.iter().map(|c| c.blobs[r].clone()))
            .collect()
    };
    let tables: Vec<Vec<Vec<u8>>> = checked.iter().map(|c| column(c.rank)).collect();
    let mine = column(0);
    let mut streams = Vec::with_capacity(checked.len());
    for (c, blobs) in checked.into_iter().zip(tables) {
        let (rank, mut stream) = (c.rank, c.stream);
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_write_timeout(Some(left)))
            .map_err(|e| io("configure socket", e))?;
        let what = format!("rank {rank} to take its table");
        crate::bootstrap::wire::write_msg(&mut stream, &Msg::Table { blobs })
            .map_err(|e| naming_timeout(e, &what, start))
            .map_err(|e| BootstrapError::Protocol(format!("rank {rank} got no table: {e}")))?;
        streams.push((rank, stream));
    }
    Ok((streams, mine))
}

impl Server<'_> {
    /// Reads every stranger's first message; a `Join` with the token is
    /// welcomed. True if anything happened.
    fn read_strangers(&mut self) -> bool {
        let mut busy = false;
        let mut keep = VecDeque::with_capacity(self.strangers.len());
        while let Some(mut c) = self.strangers.pop_front() {
            match c.pump(MAX_JOIN) {
                Step::Pending if c.since.elapsed() < JOIN_WINDOW => keep.push_back(c),
                Step::Pending => {
                    let why = format!("showed no job token within {JOIN_WINDOW:?}");
                    self.log.dropped(c.peer, &why);
                }
                Step::Closed => {
                    busy = true;
                    tracing::debug!("rendezvous: {} closed without a word", c.peer);
                }
                Step::Failed(e) => {
                    busy = true;
                    self.refuse(c, &e.to_string());
                }
                Step::Frame(Msg::Join {
                    token,
                    rank,
                    world_size,
                }) => {
                    busy = true;
                    match self.vet(&token, rank as usize, world_size as usize) {
                        Ok(rank) if c.send_now(&Msg::Welcome) => {
                            self.claimed[rank] = true;
                            c.since = Instant::now();
                            self.joined.push((rank, c));
                        }
                        Ok(rank) => {
                            tracing::debug!("rendezvous: rank {rank} left before its welcome")
                        }
                        Err(reason) => self.refuse(c, &reason),
                    }
                }
                Step::Frame(other) => {
                    busy = true;
                    self.refuse(c, &format!("expected a join, got {}", other.kind()));
                }
            }
        }
        self.strangers = keep;
        busy
    }

    /// Reads welcomed ranks' blobs. Returns whether anything happened and
    /// how many ranks checked in.
    fn read_joined(&mut self) -> (bool, usize) {
        let (mut busy, mut arrived) = (false, 0);
        let n = self.cfg.world_size;
        for (rank, mut c) in std::mem::take(&mut self.joined) {
            match c.pump(MAX_BODY) {
                Step::Pending => self.joined.push((rank, c)),
                Step::Frame(Msg::Blobs { blobs }) if blobs.len() == n => {
                    busy = true;
                    arrived += 1;
                    tracing::debug!("rendezvous: rank {rank} checked in");
                    self.checked[rank] = Some(CheckIn {
                        rank,
                        stream: c.stream,
                        blobs,
                    });
                }
                step => {
                    busy = true;
                    self.claimed[rank] = false;
                    match step {
                        Step::Frame(Msg::Blobs { blobs }) => {
                            let why =
                                format!("rank {rank} sent {} blobs for {n} ranks", blobs.len());
                            self.refuse(c, &why);
                        }
                        Step::Frame(other) => {
                            let why = format!("rank {rank}: expected blobs, got {}", other.kind());
                            self.refuse(c, &why);
                        }
                        Step::Failed(e) => self.refuse(c, &format!("rank {rank}: {e}")),
                        _ => tracing::debug!("rendezvous: rank {rank} left before checking in"),
                    }
                }
            }
        }
        (busy, arrived)
    }

    /// Accepts what is waiting, a burst at a time, evicting the oldest
    /// strangers past the bound. True if anything was accepted.
    fn accept(&mut self, listener: &TcpListener) -> bool {
        for i in 0..ACCEPT_BURST {
            match listener.accept() {
                Ok((stream, peer)) => {
                    self.accept_failing = false;
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if self.strangers.len() >= MAX_STRANGERS
                        && let Some(old) = self.strangers.pop_front()
                    {
                        let why = format!("over {MAX_STRANGERS} connections without a job token");
                        self.log.dropped(old.peer, &why);
                    }
                    self.strangers.push_back(Conn::new(stream, peer));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return i > 0,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of file descriptors, or a connection that reset
                    // before it was accepted: never fatal. Shed what costs
                    // a descriptor and try again next turn.
                    if !self.accept_failing {
                        tracing::warn!(
                            "rendezvous: accept: {e}; shedding connections without a token"
                        );
                    }
                    self.accept_failing = true;
                    if self.closing.pop_front().is_none()
                        && let Some(old) = self.strangers.pop_front()
                    {
                        self.log.dropped(old.peer, &format!("accept failed: {e}"));
                    }
                    thread::sleep(Duration::from_millis(10));
                    return true;
                }
            }
        }
        true
    }

    /// Checks a `Join`; `Err` is the reason sent back. The token comes
    /// first, so a stranger learns nothing else about the job.
    fn vet(&self, token: &str, rank: usize, world_size: usize) -> Result<usize, String> {
        let cfg = self.cfg;
        if !same_token(token, &cfg.token) {
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
        if self.claimed[rank] {
            return Err(format!("rank {rank} already checked in"));
        }
        Ok(rank)
    }

    /// Sends a short refusal without waiting, then lets the connection
    /// linger (bounded) so the refusal is read before the close.
    fn refuse(&mut self, mut c: Conn, reason: &str) {
        self.log.refused(c.peer, reason);
        c.send_now(&Msg::reject(reason));
        let _ = c.stream.shutdown(Shutdown::Write);
        if self.closing.len() >= MAX_STRANGERS {
            self.closing.pop_front();
        }
        self.closing.push_back(Closing {
            stream: c.stream,
            until: Instant::now() + LINGER,
            discarded: 0,
        });
    }

    /// The deadline passed: the ranks that came are told which did not.
    fn missing(&mut self, start: Instant) -> BootstrapError {
        let missing: Vec<usize> = (1..self.cfg.world_size)
            .filter(|&r| self.checked[r].is_none())
            .collect();
        let reason = format!("rank(s) {missing:?} never checked in");
        for c in self.checked.iter_mut().flatten() {
            if let Ok(f) = frame(&Msg::reject(&reason)) {
                let _ = c.stream.set_nonblocking(true);
                let _ = c.stream.write(&f);
            }
        }
        BootstrapError::MissingRanks {
            missing,
            after: start.elapsed(),
        }
    }
}

/// Constant-time comparison, so the token cannot be guessed byte by byte.
fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}
