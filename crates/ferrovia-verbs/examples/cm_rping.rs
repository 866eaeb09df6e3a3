//! `rping`, written with ferrovia's connection manager: the same protocol,
//! so either side works with the C `rping` of rdmacm-utils.
//!
//! Each ping: the client fills a buffer with `rdma-ping-N: ` and a
//! rotating alphabet and sends its address, rkey and length (struct
//! `rping_rdma_info { be64 buf; be32 rkey; be32 size; }`); the server
//! RDMA-reads it and sends a 16-byte "go ahead"; the client sends the
//! address of a second buffer; the server RDMA-writes the ping back there
//! and says "go ahead" again; the client checks the echo. Both sides here
//! check the data of every ping (the C client does with `-V`). The client
//! disconnects after the last ping; the server ends when it sees that.
//!
//! Usage: `cm_rping -s [-a ADDR] [-p PORT] [-C COUNT] [-v] [-t SECONDS]`
//! or `cm_rping -c -a ADDR [-I SRC] [-p PORT] [-C COUNT] [-S SIZE] [-v]
//! [-t SECONDS]` (port 7174, size 64 and, as rping, no count = forever).
//! On a machine without RDMA hardware, run it inside `cargo xtask vm`.

use std::error::Error;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use ferrovia_verbs::cm::{CmConnection, CmConnector, CmEventType, CmListener};
use ferrovia_verbs::{
    AccessFlags, MemoryRegion, ProtectionDomain, RecvWr, SendWr, Sge, VerbsError, WorkCompletion,
};

type Res<T> = Result<T, Box<dyn Error>>;

const INFO: usize = 16;
const RECV: u64 = 1;
const SEND: u64 = 2;
const RDMA: u64 = 3;
/// rping's largest ping (`RPING_BUFSIZE`).
const MAX_SIZE: usize = 64 * 1024;

/// A registered buffer; the MR field drops before the memory.
struct Buf {
    mr: MemoryRegion,
    data: Vec<u8>,
}

impl Buf {
    fn new(pd: &ProtectionDomain, len: usize, access: AccessFlags) -> Res<Buf> {
        let mut data = vec![0u8; len];
        // SAFETY: `data` lives in the same struct and is dropped after the
        // MR; it is only touched between completions.
        let mr = unsafe { MemoryRegion::register(pd, data.as_mut_ptr(), len, access)? };
        Ok(Buf { mr, data })
    }

    fn sge(&self, len: usize) -> Sge {
        Sge::new(self.data.as_ptr() as u64, len as u32, self.mr.lkey())
    }

    /// `struct rping_rdma_info` naming this buffer, in network order.
    fn info(&self) -> [u8; INFO] {
        let mut out = [0; INFO];
        out[..8].copy_from_slice(&(self.data.as_ptr() as u64).to_be_bytes());
        out[8..12].copy_from_slice(&self.mr.rkey().to_be_bytes());
        out[12..].copy_from_slice(&(self.data.len() as u32).to_be_bytes());
        out
    }
}

/// The ping data of ping `n`, as rping's client writes it: `snprintf` of
/// the header, the alphabet from `A + n % 58` cycling through `A..=z`,
/// and a NUL in the last byte.
fn ping_data(n: u32, size: usize) -> Vec<u8> {
    let header = format!("rdma-ping-{n}: ").into_bytes();
    let mut out = vec![0u8; size];
    let mut c = b'A' + (n % 58) as u8;
    for (i, byte) in out.iter_mut().enumerate() {
        if let Some(&h) = header.get(i) {
            *byte = h;
        } else {
            *byte = c;
            c = if c >= b'z' { b'A' } else { c + 1 };
        }
    }
    out[size - 1] = 0;
    out
}

/// Completions taken from the CQ in whatever order they come, handed out
/// by work-request id; on the server, the client's disconnect ends a wait.
struct Completions<'a> {
    conn: &'a CmConnection,
    early: Vec<WorkCompletion>,
    deadline: Duration,
}

impl Completions<'_> {
    /// The completion of `wr_id`, or `None` once the peer disconnected.
    fn take(&mut self, wr_id: u64) -> Res<Option<WorkCompletion>> {
        let deadline = Instant::now() + self.deadline;
        loop {
            if let Some(i) = self.early.iter().position(|wc| wc.wr_id() == wr_id) {
                let wc = self.early.remove(i);
                wc.result()?;
                return Ok(Some(wc));
            }
            if self.conn.link().is_disconnected() {
                return Ok(None);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("no completion {wr_id} within {:?}", self.deadline).into());
            }
            let mut wc = [WorkCompletion::default()];
            match self
                .conn
                .cq()
                .wait(&mut wc, left.min(Duration::from_millis(100)))
            {
                Ok(_) => self.early.push(wc[0]),
                Err(VerbsError::Timeout { .. }) => {
                    if let Some(ev) = self.conn.link().poll_event()?
                        && ev.event_type() != CmEventType::DISCONNECTED
                    {
                        eprintln!("cm_rping: ignoring {}", ev.event_type());
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn must(&mut self, wr_id: u64) -> Res<WorkCompletion> {
        self.take(wr_id)?
            .ok_or_else(|| format!("the peer disconnected before completion {wr_id}").into())
    }
}

fn post_recv(conn: &CmConnection, buf: &Buf) -> Res<()> {
    let rs = [buf.sge(INFO)];
    // SAFETY: registered, untouched until its completion is taken.
    unsafe { conn.qp().post_recv(&mut RecvWr::new(RECV, &rs))? };
    Ok(())
}

fn post_send(conn: &CmConnection, wr: &mut SendWr<'_>) -> Res<()> {
    // SAFETY: every SGE names a registered buffer that stays untouched
    // until the request's completion is taken.
    unsafe { conn.qp().post_send(wr)? };
    Ok(())
}

fn server(bind: SocketAddr, count: u32, verbose: bool, t: Duration) -> Res<()> {
    let listener = CmListener::bind(bind)?;
    println!("cm_rping: listening on {}", listener.local_addr());
    let request = listener.accept(t)?;
    let peer = request.peer_addr();
    let res = request.create_resources()?;
    let recv = Buf::new(&res.pd, INFO, AccessFlags::LOCAL_WRITE)?;
    let go_ahead = Buf::new(&res.pd, INFO, AccessFlags::NONE)?;
    let mut ping = Buf::new(&res.pd, MAX_SIZE, AccessFlags::LOCAL_WRITE)?;
    let rs = [recv.sge(INFO)];
    // SAFETY: registered, untouched until its completion is taken.
    unsafe { res.qp.post_recv(&mut RecvWr::new(RECV, &rs))? };
    let conn = request.accept_with(res, &[], t)?;
    let mut cq = Completions {
        conn: &conn,
        early: Vec::new(),
        deadline: t,
    };
    let info = |buf: &Buf| {
        let d = &buf.data;
        let addr = u64::from_be_bytes(d[..8].try_into().unwrap_or_default());
        let rkey = u32::from_be_bytes(d[8..12].try_into().unwrap_or_default());
        let size = u32::from_be_bytes(d[12..16].try_into().unwrap_or_default()) as usize;
        (addr, rkey, size)
    };
    let mut n = 0u32;
    // Each ping begins with the client's source buffer; its disconnect
    // ends the run.
    while cq.take(RECV)?.is_some() {
        let (addr, rkey, size) = info(&recv);
        if size == 0 || size > MAX_SIZE {
            return Err(format!("{peer} advertised a {size}-byte buffer").into());
        }
        post_recv(&conn, &recv)?;
        ping.data[..size].fill(0);
        let sg = [ping.sge(size)];
        post_send(&conn, &mut SendWr::read(RDMA, &sg, addr, rkey))?;
        cq.must(RDMA)?;
        if ping.data[..size] != ping_data(n, size)[..] {
            return Err(format!("ping {n} from {peer}: unexpected data").into());
        }
        let text = &ping.data[..size - 1];
        if verbose {
            println!("server ping data: {}", String::from_utf8_lossy(text));
        }
        let gs = [go_ahead.sge(INFO)];
        post_send(&conn, &mut SendWr::send(SEND, &gs))?;
        cq.must(SEND)?;
        cq.must(RECV)?;
        let (addr, rkey, sink) = info(&recv);
        post_recv(&conn, &recv)?;
        // rping echoes the string and its NUL.
        let len = (text.len() + 1).min(sink);
        let sg = [ping.sge(len)];
        post_send(&conn, &mut SendWr::write(RDMA, &sg, addr, rkey))?;
        cq.must(RDMA)?;
        post_send(&conn, &mut SendWr::send(SEND, &gs))?;
        cq.must(SEND)?;
        n += 1;
    }
    conn.qp().to_error()?;
    if n == 0 || (count != 0 && n != count) {
        return Err(format!("{peer} disconnected after {n} pings").into());
    }
    println!("cm_rping: server: {n} pings from {peer} verified");
    Ok(())
}

fn client(c: &ClientArgs, t: Duration) -> Res<()> {
    let mut connector = CmConnector::new(c.addr);
    if let Some(src) = c.source {
        connector = connector.source(src);
    }
    let resolved = connector.resolve(t)?;
    let res = resolved.create_resources()?;
    let recv = Buf::new(&res.pd, INFO, AccessFlags::LOCAL_WRITE)?;
    let mut send = Buf::new(&res.pd, INFO, AccessFlags::NONE)?;
    let mut start = Buf::new(&res.pd, c.size, AccessFlags::REMOTE_READ)?;
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut sink = Buf::new(&res.pd, c.size, rw)?;
    let rs = [recv.sge(INFO)];
    // SAFETY: registered, untouched until its completion is taken.
    unsafe { res.qp.post_recv(&mut RecvWr::new(RECV, &rs))? };
    let conn = resolved.connect(res, &[], t)?;
    let mut cq = Completions {
        conn: &conn,
        early: Vec::new(),
        deadline: t,
    };
    let mut n = 0u32;
    while c.count == 0 || n < c.count {
        start.data.copy_from_slice(&ping_data(n, c.size));
        sink.data.fill(0);
        for target in [&start, &sink] {
            send.data.copy_from_slice(&target.info());
            let ss = [send.sge(INFO)];
            post_send(&conn, &mut SendWr::send(SEND, &ss))?;
            cq.must(SEND)?;
            cq.must(RECV)?;
            post_recv(&conn, &recv)?;
        }
        if sink.data != start.data {
            return Err(format!("ping {n}: the echo differs from the ping").into());
        }
        if c.verbose {
            println!(
                "ping data: {}",
                String::from_utf8_lossy(&sink.data[..c.size - 1])
            );
        }
        n += 1;
    }
    conn.disconnect()?;
    println!("cm_rping: client: {n} pings to {} verified", c.addr);
    Ok(())
}

struct ClientArgs {
    addr: SocketAddr,
    source: Option<SocketAddr>,
    size: usize,
    count: u32,
    verbose: bool,
}

const USAGE: &str = "usage: cm_rping -s [-a ADDR] [-p PORT] [-C COUNT] [-v] [-t SECONDS]\n       cm_rping -c -a ADDR [-I SRC] [-p PORT] [-C COUNT] [-S SIZE] [-v] [-t SECONDS]";

fn main() -> Res<()> {
    let (mut side, mut addr, mut source) = (None, None, None);
    let (mut port, mut count, mut size, mut verbose, mut secs) =
        (7174u16, 0u32, 64usize, false, 30);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "-s" => side = Some(true),
            "-c" => side = Some(false),
            "-a" => addr = Some(value()?.parse::<IpAddr>()?),
            "-I" => source = Some(value()?.parse::<IpAddr>()?),
            "-p" => port = value()?.parse()?,
            "-C" => count = value()?.parse()?,
            "-S" => size = value()?.parse()?,
            "-t" => secs = value()?.parse()?,
            "-v" => verbose = true,
            "-V" => {} // both sides always check
            _ => return Err(format!("unknown option {flag}\n{USAGE}").into()),
        }
    }
    let t = Duration::from_secs(secs);
    match side {
        Some(true) => {
            let ip = addr.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
            server(SocketAddr::new(ip, port), count, verbose, t)
        }
        Some(false) => {
            let ip = addr.ok_or(USAGE)?;
            if !(32..MAX_SIZE).contains(&size) {
                return Err(format!("size {size} is out of range 32..{MAX_SIZE}").into());
            }
            let args = ClientArgs {
                addr: SocketAddr::new(ip, port),
                source: source.map(|s| SocketAddr::new(s, 0)),
                size,
                count,
                verbose,
            };
            client(&args, t)
        }
        None => Err(USAGE.into()),
    }
}
