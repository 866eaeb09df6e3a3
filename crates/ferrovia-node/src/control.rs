//! The control path that outlives bootstrap: each rank listens on a TCP
//! port of its own, published at the rendezvous, where a peer that wants
//! to replace one of their connections
//! ([`Node::reconnect`](crate::Node::reconnect),
//! [`Node::reconnect_with`](crate::Node::reconnect_with)) finds it. Rank
//! 0's port also serves the exchange of a rail's links
//! ([`Node::open_rail`](crate::Node::open_rail)): nobody knocks there, since
//! the lower rank of a pair dials.
//!
//! Nothing runs in the background: a peer's connection waits in the
//! kernel's backlog until this rank calls `reconnect` too. Of the lower
//! rank and the higher, the lower dials and the higher answers:
//!
//! 1. dialer → `Knock { token, from, to, link, generation }` (at most
//!    [`MAX_JOIN`] bytes);
//! 2. answerer → `Welcome`, or a short `Reject` to a stranger (wrong
//!    token, wrong ranks), whose connection is then dropped, or
//!    `OtherLink` / `Mismatch` to the peer reconnecting another link or
//!    another generation of it (both calls then fail);
//! 3. dialer → `Link` (its renewed side, at most [`MAX_LINK`] bytes);
//! 4. answerer connects its side to it, → `Link` (its own);
//! 5. dialer connects, → `Ready`; answerer → `Go`.
//!
//! So both sides are connected when either returns. The answerer reads
//! one connection at a time, each for at most [`PER_CONNECTION`], all
//! within the caller's deadline.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::thread;
use std::time::{Duration, Instant};

use crate::bootstrap::address;
use crate::bootstrap::launcher::DEFAULT_PORT;
use crate::bootstrap::wire::{MAX_JOIN, Msg, io, read_msg, write_msg};
use crate::error::{BootstrapError, NodeError};

/// The largest renewed link (a verbs endpoint, a UCX worker address).
pub(crate) const MAX_LINK: u32 = 64 << 10;
/// How long the answerer gives one connection to say its part.
const PER_CONNECTION: Duration = Duration::from_secs(2);

/// This rank's control listener.
#[derive(Debug)]
pub(crate) struct ControlPort {
    listener: TcpListener,
    addr: SocketAddr,
}

impl ControlPort {
    /// Listens on the address this host reaches `rendezvous` from (the
    /// interface its peers can reach), at a port the OS picks.
    pub(crate) fn bind(rendezvous: &str) -> Result<ControlPort, BootstrapError> {
        Self::bind_ip(local_ip_toward(rendezvous)?)
    }

    /// Listens on `ip`, at a port the OS picks.
    pub(crate) fn bind_ip(ip: std::net::IpAddr) -> Result<ControlPort, BootstrapError> {
        let listener = TcpListener::bind((ip, 0)).map_err(|e| io("control port: listen", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| io("control port: listen", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| io("control port: listen", e))?;
        tracing::debug!("control port: listening on {addr}");
        Ok(ControlPort { listener, addr })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The listener again (the same socket), for rank 0's side of a rail's
    /// exchange, which consumes what it serves on.
    pub(crate) fn listener(&self) -> Result<TcpListener, BootstrapError> {
        self.listener
            .try_clone()
            .map_err(|e| io("control port: share the listener", e))
    }
}

/// The source address the routing table picks toward `rendezvous` (a UDP
/// "connect" sends nothing).
fn local_ip_toward(rendezvous: &str) -> Result<std::net::IpAddr, BootstrapError> {
    let hp = address::parse("rendezvous address", rendezvous, DEFAULT_PORT)?;
    let target = (hp.host.as_str(), hp.port.max(1))
        .to_socket_addrs()
        .map_err(|e| io(&format!("control port: resolve {hp}"), e))?
        .next()
        .ok_or_else(|| BootstrapError::Protocol(format!("control port: {hp} has no address")))?;
    route_source(target)
}

/// The source address the routing table picks toward `target` (a UDP
/// "connect" sends nothing).
pub(crate) fn route_source(target: SocketAddr) -> Result<std::net::IpAddr, BootstrapError> {
    let any: SocketAddr = if target.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let probe = UdpSocket::bind(any).map_err(|e| io("control port: route probe", e))?;
    probe
        .connect(target)
        .map_err(|e| io(&format!("control port: route toward {target}"), e))?;
    Ok(probe
        .local_addr()
        .map_err(|e| io("control port: route probe", e))?
        .ip())
}

/// Who is reconnecting with whom, under which token, until when.
pub(crate) struct Handshake<'a> {
    pub(crate) token: &'a str,
    pub(crate) me: usize,
    pub(crate) peer: usize,
    pub(crate) deadline: Instant,
    /// Which of the pair's connections (0: the node's own).
    pub(crate) link: u32,
    /// The generation of the connection this call replaces (the count of
    /// reconnects of this link with the peer that succeeded).
    pub(crate) generation: u32,
    /// This rank's member (a store-backed job's incarnation; else 0).
    pub(crate) incarnation: u64,
    /// The peer's member this call expects: a knock from another is a
    /// stranger's (a dead member's, whose lease expired).
    pub(crate) peer_incarnation: u64,
}

impl Handshake<'_> {
    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    fn mismatch(&self, theirs: u32) -> BootstrapError {
        BootstrapError::ReconnectMismatch {
            peer: self.peer,
            ours: self.generation,
            theirs,
        }
    }

    fn other_link(&self, theirs: u32) -> BootstrapError {
        BootstrapError::ReconnectLinkMismatch {
            peer: self.peer,
            ours: self.link,
            theirs,
        }
    }

    fn timed_out(&self, what: &str, started: Instant) -> BootstrapError {
        BootstrapError::TimedOut {
            what: format!("rank {} to {what}", self.peer),
            after: started.elapsed(),
        }
    }

    /// The lower rank's side: dial the peer at `at`, trade `mine` for its
    /// link, and `connect` to that.
    pub(crate) fn dial(
        &self,
        at: SocketAddr,
        mine: Vec<u8>,
        connect: impl FnOnce(Vec<u8>) -> Result<(), NodeError>,
    ) -> Result<(), NodeError> {
        let started = Instant::now();
        let mut last = String::from("no attempt");
        // Until the peer welcomes us: a refused, reset or silent
        // connection (the peer is not there yet, or going) is tried again.
        let mut s = loop {
            let left = self.left();
            if left.is_zero() {
                return Err(BootstrapError::PeerUnreachable {
                    peer: self.peer,
                    addr: at,
                    after: started.elapsed(),
                    last,
                }
                .into());
            }
            match self.knock(at, left) {
                Ok(s) => break s,
                Err(Knocked::Refused(e)) => return Err(e.into()),
                Err(Knocked::Failed(e)) => last = e,
            }
            tracing::debug!("reconnect: rank {} at {at}: {last}; again", self.peer);
            thread::sleep(self.left().min(Duration::from_millis(100)));
        };
        let timeouts = |s: &TcpStream| {
            let t = Some(self.left().max(Duration::from_millis(1)));
            s.set_read_timeout(t)
                .and_then(|()| s.set_write_timeout(t))
                .map_err(|e| io("reconnect: socket timeout", e))
        };
        let fail = |e: BootstrapError, what: &str| match e {
            BootstrapError::Io { source, .. }
                if matches!(source.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
            {
                self.timed_out(what, started)
            }
            e => e,
        };
        write_msg(&mut s, &Msg::Link { link: mine })?;
        timeouts(&s)?;
        let theirs = match read_msg(&mut s, MAX_LINK).map_err(|e| fail(e, "send its link"))? {
            Msg::Link { link } => link,
            m => return Err(unexpected(m, "a link").into()),
        };
        connect(theirs)?;
        write_msg(&mut s, &Msg::Ready)?;
        timeouts(&s)?;
        match read_msg(&mut s, MAX_JOIN).map_err(|e| fail(e, "connect its side"))? {
            Msg::Go => Ok(()),
            m => Err(unexpected(m, "go").into()),
        }
    }

    /// One attempt to be welcomed at `at`: the stream once welcomed. The
    /// welcome is awaited until the deadline: the connection waits in the
    /// peer's backlog until it calls `reconnect` too.
    fn knock(&self, at: SocketAddr, left: Duration) -> Result<TcpStream, Knocked> {
        let failed = |e: &dyn std::fmt::Display| Knocked::Failed(e.to_string());
        let mut s =
            TcpStream::connect_timeout(&at, left.min(PER_CONNECTION)).map_err(|e| failed(&e))?;
        let t = Some(left.max(Duration::from_millis(1)));
        s.set_read_timeout(t)
            .and_then(|()| s.set_write_timeout(t))
            .map_err(|e| failed(&e))?;
        let knock = Msg::Knock {
            token: self.token.to_owned(),
            from: self.me as u32,
            to: self.peer as u32,
            link: self.link,
            generation: self.generation,
            incarnation: self.incarnation,
        };
        write_msg(&mut s, &knock).map_err(|e| failed(&e))?;
        match read_msg(&mut s, MAX_JOIN) {
            Ok(Msg::Welcome) => Ok(s),
            Ok(Msg::OtherLink { link }) => Err(Knocked::Refused(self.other_link(link))),
            Ok(Msg::Mismatch { generation }) => Err(Knocked::Refused(self.mismatch(generation))),
            Ok(Msg::Reject { reason }) => Err(Knocked::Refused(BootstrapError::Rejected {
                rank: self.me,
                reason: format!("rank {} refused to reconnect: {reason}", self.peer),
            })),
            Ok(m) => Err(Knocked::Refused(unexpected(m, "a welcome"))),
            Err(e @ BootstrapError::Io { .. }) => Err(failed(&e)),
            Err(e) => Err(Knocked::Refused(e)),
        }
    }

    /// The higher rank's side: take connections on `port` until the peer
    /// knocks with the token, trade `mine` for its link, `connect`.
    pub(crate) fn answer(
        &self,
        port: &ControlPort,
        mine: Vec<u8>,
        connect: impl FnOnce(Vec<u8>) -> Result<(), NodeError>,
    ) -> Result<(), NodeError> {
        let started = Instant::now();
        // A welcomed dialer that goes before sending its link (it gave up,
        // or died) does not end the wait: the next connection may be its
        // retry.
        let (mut s, theirs) = loop {
            if self.left().is_zero() {
                return Err(self.timed_out("knock on our control port", started).into());
            }
            let Some(mut s) = self.next_knock(port)? else {
                continue;
            };
            let t = Some(self.left().max(Duration::from_millis(1)));
            s.set_read_timeout(t)
                .map_err(|e| io("reconnect: socket timeout", e))?;
            match read_msg(&mut s, MAX_LINK) {
                Ok(Msg::Link { link }) => break (s, link),
                Ok(m) => return Err(unexpected(m, "a link").into()),
                Err(e) => tracing::info!("reconnect: rank {} went before its link: {e}", self.peer),
            }
        };
        connect(theirs)?;
        write_msg(&mut s, &Msg::Link { link: mine })?;
        match read_msg(&mut s, MAX_JOIN) {
            Ok(Msg::Ready) => {}
            Ok(m) => return Err(unexpected(m, "ready").into()),
            Err(e) => return Err(e.into()),
        }
        write_msg(&mut s, &Msg::Go)?;
        Ok(())
    }

    /// The next connection on `port` that knocks as our peer (`None`
    /// when none came for a moment, or it was a stranger).
    fn next_knock(&self, port: &ControlPort) -> Result<Option<TcpStream>, NodeError> {
        match port.listener.accept() {
            Ok((s, from)) => self.admit(s, from),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                thread::sleep(self.left().min(Duration::from_millis(10)));
                Ok(None)
            }
            Err(e) => {
                // Out of descriptors and the like: shed, try again.
                tracing::warn!("reconnect: control port accept: {e}");
                thread::sleep(self.left().min(Duration::from_millis(100)));
                Ok(None)
            }
        }
    }

    /// Reads a connection's knock (bounded in bytes and time): the stream
    /// if it is our peer with the token, else `None` after a short refusal.
    fn admit(&self, mut s: TcpStream, from: SocketAddr) -> Result<Option<TcpStream>, NodeError> {
        let t = Some(
            self.left()
                .min(PER_CONNECTION)
                .max(Duration::from_millis(1)),
        );
        if s.set_nonblocking(false)
            .and_then(|()| s.set_read_timeout(t))
            .and_then(|()| s.set_write_timeout(t))
            .is_err()
        {
            return Ok(None);
        }
        let why = match read_msg(&mut s, MAX_JOIN) {
            Ok(Msg::Knock {
                token,
                from: f,
                to,
                link,
                generation,
                incarnation,
            }) if token == self.token
                && f as usize == self.peer
                && to as usize == self.me
                && incarnation == self.peer_incarnation =>
            {
                // The link first: generations of different links are not
                // comparable.
                if link != self.link {
                    let _ = write_msg(&mut s, &Msg::OtherLink { link: self.link });
                    return Err(self.other_link(link).into());
                }
                if generation != self.generation {
                    let _ = write_msg(
                        &mut s,
                        &Msg::Mismatch {
                            generation: self.generation,
                        },
                    );
                    return Err(self.mismatch(generation).into());
                }
                write_msg(&mut s, &Msg::Welcome)?;
                return Ok(Some(s));
            }
            Ok(Msg::Knock { token, .. }) if token != self.token => "wrong job token".to_owned(),
            Ok(Msg::Knock {
                from: f,
                incarnation,
                ..
            }) if f as usize == self.peer && incarnation != self.peer_incarnation => format!(
                "rank {f}'s member {incarnation} is not the one expected ({})",
                self.peer_incarnation
            ),
            Ok(Msg::Knock { from: f, to, .. }) => {
                format!(
                    "rank {} expects rank {} here, not {f} for {to}",
                    self.me, self.peer
                )
            }
            Ok(m) => format!("expected a knock, got {}", m.kind()),
            Err(e) => format!("{e}"),
        };
        tracing::info!("reconnect: refused a connection from {from}: {why}");
        let _ = write_msg(&mut s, &Msg::reject(&why));
        Ok(None)
    }
}

/// How a knock went wrong.
enum Knocked {
    /// For good: the peer refused, or spoke another protocol.
    Refused(BootstrapError),
    /// For now: no connection, or it broke.
    Failed(String),
}

fn unexpected(m: Msg, wanted: &str) -> BootstrapError {
    BootstrapError::Protocol(format!("reconnect: expected {wanted}, got {}", m.kind()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handshake(me: usize, peer: usize, link: u32, generation: u32) -> Handshake<'static> {
        Handshake {
            token: "t",
            me,
            peer,
            deadline: Instant::now() + Duration::from_secs(5),
            link,
            generation,
            incarnation: 0,
            peer_incarnation: 0,
        }
    }

    /// Both sides of one reconnect, rank 0 dialing rank 1's port: (link,
    /// generation) of each.
    fn pair(
        dialer: (u32, u32),
        answerer: (u32, u32),
    ) -> (Result<(), NodeError>, Result<(), NodeError>) {
        let port = ControlPort::bind("127.0.0.1:1").unwrap();
        let at = port.addr();
        let answering = thread::spawn(move || {
            handshake(1, 0, answerer.0, answerer.1).answer(&port, b"one".to_vec(), |theirs| {
                assert_eq!(theirs, b"zero");
                Ok(())
            })
        });
        let dialed = handshake(0, 1, dialer.0, dialer.1).dial(at, b"zero".to_vec(), |theirs| {
            assert_eq!(theirs, b"one");
            Ok(())
        });
        (dialed, answering.join().unwrap())
    }

    #[test]
    fn calls_replacing_the_same_generation_pair() {
        let (d, a) = pair((0, 3), (0, 3));
        assert!(d.is_ok(), "{d:?}");
        assert!(a.is_ok(), "{a:?}");
        let (d, a) = pair((4, 0), (4, 0));
        assert!(d.is_ok() && a.is_ok(), "{d:?} {a:?}");
    }

    #[test]
    fn a_call_replacing_another_generation_fails_on_both_sides() {
        let (d, a) = pair((0, 1), (0, 2));
        assert!(
            matches!(
                d,
                Err(NodeError::Bootstrap(BootstrapError::ReconnectMismatch {
                    peer: 1,
                    ours: 1,
                    theirs: 2
                }))
            ),
            "{d:?}"
        );
        assert!(
            matches!(
                a,
                Err(NodeError::Bootstrap(BootstrapError::ReconnectMismatch {
                    peer: 0,
                    ours: 2,
                    theirs: 1
                }))
            ),
            "{a:?}"
        );
    }

    /// A knock from another member of the peer's rank (a dead one's, with
    /// the job's token and the right generation) is a stranger's: refused,
    /// while the answerer waits on for the member it expects, which pairs.
    #[test]
    fn a_knock_from_another_member_of_the_rank_is_refused_and_the_expected_one_pairs() {
        let port = ControlPort::bind("127.0.0.1:1").unwrap();
        let at = port.addr();
        let answering = thread::spawn(move || {
            let mut h = handshake(1, 0, 0, 0);
            h.peer_incarnation = 40;
            h.answer(&port, b"one".to_vec(), |theirs| {
                assert_eq!(theirs, b"new");
                Ok(())
            })
        });
        let mut dead = handshake(0, 1, 0, 0);
        dead.incarnation = 7;
        dead.deadline = Instant::now() + Duration::from_millis(500);
        let refused = dead.dial(at, b"old".to_vec(), |_| panic!("a stranger connected"));
        match refused {
            Err(NodeError::Bootstrap(BootstrapError::Rejected { reason, .. })) => {
                assert!(
                    reason.contains("member 7 is not the one expected (40)"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        let mut new = handshake(0, 1, 0, 0);
        new.incarnation = 40;
        let paired = new.dial(at, b"new".to_vec(), |theirs| {
            assert_eq!(theirs, b"one");
            Ok(())
        });
        assert!(paired.is_ok(), "{paired:?}");
        let answered = answering.join().unwrap();
        assert!(answered.is_ok(), "{answered:?}");
    }

    #[test]
    fn a_knock_for_another_link_fails_on_both_sides() {
        // Same generation, other link: the link is checked first, and
        // neither side connects (the closures would see the wrong bytes).
        let (d, a) = pair((2, 0), (1, 0));
        assert!(
            matches!(
                d,
                Err(NodeError::Bootstrap(
                    BootstrapError::ReconnectLinkMismatch {
                        peer: 1,
                        ours: 2,
                        theirs: 1
                    }
                ))
            ),
            "{d:?}"
        );
        assert!(
            matches!(
                a,
                Err(NodeError::Bootstrap(
                    BootstrapError::ReconnectLinkMismatch {
                        peer: 0,
                        ours: 1,
                        theirs: 2
                    }
                ))
            ),
            "{a:?}"
        );
        // The node's own link against a rail's, generations differing too.
        let (d, a) = pair((0, 5), (1, 0));
        assert!(
            matches!(
                d,
                Err(NodeError::Bootstrap(
                    BootstrapError::ReconnectLinkMismatch {
                        ours: 0,
                        theirs: 1,
                        ..
                    }
                ))
            ),
            "{d:?}"
        );
        assert!(
            matches!(
                a,
                Err(NodeError::Bootstrap(
                    BootstrapError::ReconnectLinkMismatch {
                        ours: 1,
                        theirs: 0,
                        ..
                    }
                ))
            ),
            "{a:?}"
        );
    }
}
