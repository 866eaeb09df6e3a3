//! `ferrovia-perf -R write_bw|send_bw [SERVER]`: perftest's rdma_cm mode,
//! so either side can be `ib_write_bw -R` / `ib_send_bw -R` (perftest 4.5,
//! which calls itself version 6.06; as Debian 12 ships it).
//!
//! perftest's exchange, as it goes on the wire: the client makes two
//! connections through the connection manager to the server's port, with
//! no private data of its own: first a control connection, then the test
//! connection. Over the control connection the two sides take turns, the
//! client sending first and the server answering with a message of the
//! same size, by SEND and RECV: the version string (16 bytes, `6.06`),
//! the cycle buffer and the cache line size (big-endian u32 each), the
//! MTU (2 bytes: its enum value as a digit and a zero), a zeroed
//! destination (`struct pingpong_dest`, 56 bytes), then, once the test
//! connection is up, a zeroed destination and four real ones (send_bw's
//! server answers the last once its receives are posted):
//!
//! ```text
//! be32 lid, out_reads, qpn, psn, rkey; pad; be64 vaddr; gid[16]; be32 srqn, gid_index
//! ```
//!
//! then the traffic (the client's RDMA writes to the server's `vaddr` /
//! `rkey`, or its sends into the server's posted receives), on write_bw
//! five reports (size, iterations: big-endian u64; peak and average MB/s,
//! Mpps: big-endian f64), and a last destination when the client is done;
//! the client hangs up. The sequence was read off the wire (a ferrovia
//! server logging what `ib_write_bw -R` and `ib_send_bw -R` sent), since
//! it depends on perftest's version. This server answers destinations
//! with its own and reports with zeros (it measured nothing); the client
//! sends its measurements. The server receives send_bw's messages in
//! rounds of `-t` receives, so a client may wait on receiver-not-ready
//! retries between rounds: the bandwidth a ferrovia server sees is not a
//! measure of ferrovia.

use std::collections::VecDeque;
use std::error::Error;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use ferrovia::{
    Backend, Channel, ChannelBuilder, ConnectError, Connector, Gather, Listener,
    ReceiveWorkRequest, RegisterOptions, RegisteredBuffer, RemoteMemoryRegion, Scatter,
    SendWorkRequest, TransportError, VerbsChannel, WriteWorkRequest,
};

use crate::args::Args;
use crate::report;

type Res<T = ()> = Result<T, Box<dyn Error>>;

/// perftest's version string, which decides its message formats.
const VERSION: &[u8] = b"6.06";
/// `struct pingpong_dest` on the wire.
const DEST: usize = 56;
/// What the control connection carries at most (the destination).
const INBOX: usize = 64;
/// The cycle buffer this side announces (a page, as perftest's default).
const CYCLE: u32 = 4096;
/// How long any wait may take (a server waits for the client's whole run).
const WAIT: Duration = Duration::from_secs(300);
/// How long a server waits for the client to hang up once it is done.
const HANG_UP: Duration = Duration::from_secs(10);
/// Destinations exchanged after the test connection's zeroed one, before
/// the traffic (three, and one more that send_bw's server answers once its
/// receives are posted).
const DESTS_BEFORE_TRAFFIC: usize = 4;
/// write_bw's reports after the traffic (`xchg_bw_reports`: size and
/// iterations as big-endian u64, peak and average MB/s and Mpps as
/// big-endian f64); send_bw has none.
const REPORTS: usize = 5;

/// Control messages after the test connection's zeroed destination: the
/// destinations, the reports, the client's last destination.
fn messages_after_test_connection(test: &str) -> usize {
    DESTS_BEFORE_TRAFFIC + if test == "write_bw" { REPORTS } else { 0 } + 1
}

/// The control connection and its receive buffer.
struct Control {
    ch: Channel,
    inbox: RegisteredBuffer,
    client: bool,
}

impl Control {
    fn new(ch: Channel, client: bool) -> Res<Control> {
        let inbox = ch.registry().alloc(INBOX, RegisterOptions::local())?;
        Ok(Control { ch, inbox, client })
    }

    /// One turn (perftest's `ctx_xchg_data`): the client sends and then
    /// receives the answer (its receive posted first), the server
    /// receives and answers with `mine`. The peer's message.
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<u8>, TransportError> {
        if !self.client {
            let got = self.receive()?;
            self.send(mine)?;
            return Ok(got);
        }
        let out = self
            .ch
            .registry()
            .register_buffer(mine.to_vec(), RegisterOptions::local())?;
        let inbox = &mut self.inbox;
        let n = self
            .ch
            .scope(|s| -> Result<usize, TransportError> {
                let got = s.post_receive(ReceiveWorkRequest::new(Scatter::of(inbox)?))?;
                let g = [Gather::of(&out)?];
                s.post_send(SendWorkRequest::new(&g)?)?.wait(WAIT)?;
                Ok(got.wait(WAIT)?.byte_len())
            })
            .map_err(flatten)?;
        Ok(self.inbox[..n].to_vec())
    }

    fn receive(&mut self) -> Result<Vec<u8>, TransportError> {
        let inbox = &mut self.inbox;
        let n = self
            .ch
            .scope(|s| -> Result<usize, TransportError> {
                Ok(
                    s.post_receive(ReceiveWorkRequest::new(Scatter::of(inbox)?))?
                        .wait(WAIT)?
                        .byte_len(),
                )
            })
            .map_err(flatten)?;
        Ok(self.inbox[..n].to_vec())
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), TransportError> {
        let out = self
            .ch
            .registry()
            .register_buffer(bytes.to_vec(), RegisterOptions::local())?;
        self.ch.send(&[Gather::of(&out)?])
    }
}

/// A scope's error as the transport error behind it.
fn flatten(e: ferrovia::ScopeError<TransportError>) -> TransportError {
    match e {
        ferrovia::ScopeError::Closure(e) | ferrovia::ScopeError::Both { closure: e, .. } => e,
        other => TransportError::Config(other.to_string()),
    }
}

/// This side's `struct pingpong_dest`: the test connection's queue pair
/// and the buffer the peer may write.
fn dest(test: &Channel, buffer: RemoteMemoryRegion) -> Res<[u8; DEST]> {
    let ep = test.endpoint()?;
    let mut d = [0u8; DEST];
    d[4..8].copy_from_slice(&1u32.to_be_bytes()); // out_reads
    d[8..12].copy_from_slice(&ep.qpn.to_be_bytes());
    d[12..16].copy_from_slice(&ep.psn.to_be_bytes());
    d[16..20].copy_from_slice(&buffer.rkey().to_be_bytes());
    d[24..32].copy_from_slice(&buffer.addr().to_be_bytes());
    d[32..48].copy_from_slice(&ep.gid.0);
    Ok(d)
}

/// The peer's buffer from its destination.
fn peer_buffer(d: &[u8], len: usize) -> Res<RemoteMemoryRegion> {
    if d.len() != DEST {
        return Err(format!("a destination of {} bytes, not {DEST}", d.len()).into());
    }
    let rkey = u32::from_be_bytes(d[16..20].try_into()?);
    let vaddr = u64::from_be_bytes(d[24..32].try_into()?);
    Ok(RemoteMemoryRegion::new(vaddr, len as u64, rkey)?)
}

/// The settings of both connections.
fn settings(args: &Args) -> ChannelBuilder {
    let depth = args.tx_depth.max(1) as u32;
    ChannelBuilder::default()
        .send_depth(depth)
        .recv_depth(depth)
        .op_timeout(WAIT)
}

/// `ferrovia-perf -R`: checks what the mode supports, then runs a side.
pub(crate) fn run(args: &Args) -> Res {
    if !matches!(args.test.as_str(), "write_bw" | "send_bw") {
        return Err("-R (perftest's rdma_cm mode) runs write_bw and send_bw".into());
    }
    let [size] = args.sizes[..] else {
        return Err("-R runs one size at a time (-s, not -a)".into());
    };
    if args.qps != 1 || args.asynchronous {
        return Err("-R runs one QP on the scoped path (no -q, no --async)".into());
    }
    match &args.server {
        Some(host) => client(args, host, size),
        None => server(args, size),
    }
}

/// perftest's client side against `ib_*_bw -R SERVER`.
fn client(args: &Args, host: &str, size: usize) -> Res {
    let addr = (host, args.port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| format!("{host} has no address"))?;
    let connector = Connector::new()
        .backend(Backend::Verbs)
        .channel(settings(args));
    let mut control = Control::new(connect_retrying(&connector, addr)?, true)?;
    let version = control.exchange(&padded(VERSION, 16))?;
    control.exchange(&CYCLE.to_be_bytes())?;
    control.exchange(&64u32.to_be_bytes())?;
    let mtu = control.exchange(&mtu_message(&control.ch)?)?;
    control.exchange(&[0; DEST])?;
    let mut test = connect_retrying(&connector, addr)?;
    // Its descriptor goes in this side's destination (which perftest
    // only prints): readable, not writable.
    let buf = test
        .registry()
        .alloc(size, RegisterOptions::local().allow_remote_read())?;
    let mine = dest(&test, buf.registration().remote()?)?;
    control.exchange(&[0; DEST])?;
    let mut theirs = Vec::new();
    for _ in 0..DESTS_BEFORE_TRAFFIC {
        theirs = control.exchange(&mine)?;
    }
    let start = Instant::now();
    if args.test == "write_bw" {
        let remote = peer_buffer(&theirs, size)?;
        post_all(&mut test, &buf, Some(remote), args.iters, args.tx_depth)?;
    } else {
        post_all(&mut test, &buf, None, args.iters, args.tx_depth)?;
    }
    let secs = start.elapsed().as_secs_f64();
    let avg = (size * args.iters) as f64 / secs / report::MB;
    let mpps = avg * report::MB / size as f64 / 1e6;
    if args.test == "write_bw" {
        let reports = [
            (size as u64).to_be_bytes(),
            (args.iters as u64).to_be_bytes(),
            avg.to_bits().to_be_bytes(),
            avg.to_bits().to_be_bytes(),
            mpps.to_bits().to_be_bytes(),
        ];
        for r in reports {
            control.exchange(&r)?;
        }
    }
    control.exchange(&mine)?;
    report::note(format_args!(
        "ferrovia-perf {} -R: connected to {addr} (perftest version {}, MTU enum {})",
        args.test,
        text(&version),
        text(&mtu)
    ));
    report::bw_header();
    report::bw_row(size, args.iters, avg, avg);
    Ok(())
}

/// `iters` writes to `remote` (or sends, without it) of `buf`, at most
/// `depth` outstanding.
fn post_all(
    ch: &mut Channel,
    buf: &RegisteredBuffer,
    remote: Option<RemoteMemoryRegion>,
    iters: usize,
    depth: usize,
) -> Res {
    ch.scope(|s| -> Result<(), TransportError> {
        let g = [Gather::of(buf)?];
        let mut pending: VecDeque<ferrovia::ScopedPendingWork<'_, '_>> = VecDeque::new();
        for _ in 0..iters {
            if pending.len() >= depth
                && let Some(oldest) = pending.pop_front()
            {
                oldest.wait(WAIT)?;
            }
            pending.push_back(match remote {
                Some(r) => s.post_write(WriteWorkRequest::new(&g, r)?)?,
                None => s.post_send(SendWorkRequest::new(&g)?)?,
            });
        }
        for p in pending {
            p.wait(WAIT)?;
        }
        Ok(())
    })
    .map_err(flatten)?;
    Ok(())
}

/// perftest's server side for `ib_*_bw -R SERVER`: answers every control
/// message in kind; on send_bw receives the client's `iters` messages.
fn server(args: &Args, size: usize) -> Res {
    let bind: SocketAddr = ([0, 0, 0, 0], args.port).into();
    let listener = Listener::builder(bind)
        .backend(Backend::Verbs)
        .channel(settings(args))
        .bind()?;
    report::note(format_args!(
        "ferrovia-perf {} -R: listening on {bind}",
        args.test
    ));
    let incoming = listener.accept(WAIT)?;
    let peer = incoming.peer_addr();
    let mut control = Control::new(incoming.accept(&[], WAIT)?, false)?;
    for answer in [
        padded(VERSION, 16),
        CYCLE.to_be_bytes().to_vec(),
        64u32.to_be_bytes().to_vec(),
    ] {
        control.exchange(&answer)?;
    }
    // The MTU: the client's, back.
    let mtu = control.receive()?;
    control.send(&mtu)?;
    control.exchange(&[0; DEST])?;
    let incoming = listener.accept(WAIT)?;
    let reg = incoming.registry().clone();
    // perftest writes within twice the larger of the size and the cycle.
    let len = 2 * size.max(CYCLE as usize);
    let board = reg.alloc(len, RegisterOptions::local().allow_remote_write())?;
    let mut test = incoming.accept(&[], WAIT)?;
    let mine = dest(&test, board.registration().remote()?)?;
    let iters = args.iters;
    let receiving = args.test == "send_bw";
    let received = std::thread::scope(|t| -> Res<usize> {
        let test = &mut test;
        let receiver =
            receiving.then(|| t.spawn(move || receive_all(test, size, iters, args.tx_depth)));
        control.exchange(&[0; DEST])?;
        // The destinations, write_bw's reports, the client's last word.
        let after = messages_after_test_connection(&args.test);
        for _ in 0..after {
            let got = control.receive()?;
            if got.len() == DEST {
                control.send(&mine)?;
            } else {
                // A report: this passive side measured nothing.
                control.send(&vec![0; got.len()])?;
            }
        }
        let received = match receiver {
            Some(h) => h.join().map_err(|_| "the receiving thread panicked")??,
            None => 0,
        };
        Ok(received)
    })?;
    // The client hangs up first (perftest's teardown waits for its own
    // disconnect to complete): wait for that, a while.
    let deadline = Instant::now() + HANG_UP;
    while !control.ch.is_disconnected() && !test.is_disconnected() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    report::note(format_args!(
        "ferrovia-perf {} -R: served {peer}{}",
        args.test,
        if receiving {
            format!(": {received} messages of {size} bytes received")
        } else {
            String::new()
        }
    ));
    Ok(())
}

/// Receives `iters` messages, in rounds of as many receives as the queue
/// holds.
fn receive_all(
    ch: &mut Channel,
    size: usize,
    iters: usize,
    depth: usize,
) -> Result<usize, TransportError> {
    let reg = ch.registry().clone();
    let mut bufs = (0..depth.min(iters))
        .map(|_| reg.alloc(size, RegisterOptions::local()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut got = 0;
    while got < iters {
        let round = (iters - got).min(bufs.len());
        ch.scope(|s| -> Result<(), TransportError> {
            let handles = bufs[..round]
                .iter_mut()
                .map(|b| s.post_receive(ReceiveWorkRequest::new(Scatter::of(b)?)))
                .collect::<Result<Vec<_>, _>>()?;
            for h in handles {
                h.wait(WAIT)?;
            }
            Ok(())
        })
        .map_err(flatten)?;
        got += round;
    }
    Ok(got)
}

/// Connects, retrying while the server is not (yet, or again) listening.
fn connect_retrying(connector: &Connector, addr: SocketAddr) -> Result<Channel, ConnectError> {
    let started = Instant::now();
    loop {
        match connector.connect(addr, &[], Duration::from_secs(10)) {
            Err(ConnectError::NotListening { .. } | ConnectError::Refused { .. })
                if started.elapsed() < Duration::from_secs(20) =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// The MTU message: the port's MTU as its enum value's digit, and a zero.
fn mtu_message(ch: &Channel) -> Res<[u8; 2]> {
    Ok([b'0' + ch.endpoint()?.mtu as u8, 0])
}

fn padded(bytes: &[u8], len: usize) -> Vec<u8> {
    let mut v = bytes.to_vec();
    v.resize(len, 0);
    v
}

/// A NUL-terminated string from the wire.
fn text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}
