//! rdma-core's `rping` (package rdmacm-utils) in ferrovia, either side,
//! so it runs against the C program: `rping -c` against this server,
//! this client against `rping -s`. Verbs only.
//!
//! The protocol, as in rping.c: each message is 16 bytes, a buffer's
//! address (big-endian u64), rkey (u32) and length (u32). For every ping
//! the client SENDs its source buffer's; the server RDMA-READs it and
//! SENDs a 16-byte go-ahead; the client SENDs its sink buffer's; the
//! server RDMA-WRITEs the data there and SENDs a go-ahead. The client then
//! checks that the sink holds the source's bytes (`rping -V`), and after
//! COUNT pings disconnects, which ends the server.
//!
//! ```sh
//! cargo run --example rping -- server 0.0.0.0:7174          # then: rping -c -a ADDR -C 10 -V
//! rping -s -a 192.0.2.1 -p 7174 &
//! cargo run --example rping -- client 192.0.2.1:7174 10 64  # COUNT SIZE
//! ```

use std::error::Error;
use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrovia::{
    Backend, Channel, ConnectError, Connector, Gather, Listener, ReceiveWorkRequest,
    RegisterOptions, RegisteredBuffer, RemoteMemoryRegion, Scatter, SendWorkRequest,
    TransportError,
};

type Res<T = ()> = Result<T, Box<dyn Error>>;

/// A buffer advertisement (`struct rping_rdma_info`).
const INFO: usize = 16;
/// rping's largest ping (`RPING_BUFSIZE - 1`).
const MAX_SIZE: usize = 64 * 1024 - 1;
const WAIT: Duration = Duration::from_secs(20);

fn main() -> Res {
    // Spans and events on stderr as RUST_LOG filters them (unset: errors).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["server", addr] => server(addr.parse()?),
        ["client", addr, count, size] => client(addr.parse()?, count.parse()?, size.parse()?),
        _ => Err("usage: rping server ADDR:PORT | client ADDR:PORT COUNT SIZE".into()),
    }
}

/// `struct rping_rdma_info` as rping sends it.
fn encode(region: RemoteMemoryRegion, len: usize) -> [u8; INFO] {
    let mut b = [0u8; INFO];
    b[..8].copy_from_slice(&region.addr().to_be_bytes());
    b[8..12].copy_from_slice(&region.rkey().to_be_bytes());
    b[12..].copy_from_slice(&(len as u32).to_be_bytes());
    b
}

/// The region a received advertisement names.
fn decode(b: &[u8]) -> Res<RemoteMemoryRegion> {
    if b.len() != INFO {
        return Err(format!("a buffer advertisement of {} bytes, not {INFO}", b.len()).into());
    }
    let addr = u64::from_be_bytes(b[..8].try_into()?);
    let rkey = u32::from_be_bytes(b[8..12].try_into()?);
    let len = u32::from_be_bytes(b[12..].try_into()?);
    Ok(RemoteMemoryRegion::new(addr, u64::from(len), rkey)?)
}

/// Posts a receive into `inbox` and sends `out` (the receive first, so the
/// peer's next message finds it), waits for both; the received length.
fn send_then_receive(
    channel: &mut Channel,
    out: &RegisteredBuffer,
    inbox: &mut RegisteredBuffer,
) -> Result<usize, TransportError> {
    let n = channel.scope(|s| -> Result<usize, TransportError> {
        let received = s.post_receive(ReceiveWorkRequest::new(Scatter::of(inbox)?))?;
        let g = [Gather::of(out)?];
        s.post_send(SendWorkRequest::new(&g)?)?.wait(WAIT)?;
        Ok(received.wait(WAIT)?.byte_len())
    });
    n.map_err(flatten)
}

/// A scope's error as the transport error behind it.
fn flatten(e: ferrovia::ScopeError<TransportError>) -> TransportError {
    match e {
        ferrovia::ScopeError::Closure(e) | ferrovia::ScopeError::Both { closure: e, .. } => e,
        other => TransportError::Config(other.to_string()),
    }
}

/// Serves one client until it disconnects.
fn server(addr: SocketAddr) -> Res {
    let listener = Listener::builder(addr).backend(Backend::Verbs).bind()?;
    println!("rping: listening on {}", listener.local_addr());
    std::io::stdout().flush()?;
    let incoming = listener.accept(WAIT)?;
    let peer = incoming.peer_addr();
    let mut ch = incoming.accept(&[], WAIT)?;
    let reg = ch.registry().clone();
    let mut data = reg.alloc(MAX_SIZE, RegisterOptions::local())?;
    let go_ahead = reg.register_buffer(vec![0u8; INFO], RegisterOptions::local())?;
    let mut inbox = reg.alloc(INFO, RegisterOptions::local())?;

    // The first source advertisement (the client sends it once connected).
    let first = ch.scope(|s| -> Result<usize, TransportError> {
        Ok(
            s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?
                .wait(WAIT)?
                .byte_len(),
        )
    });
    let mut len = first.map_err(flatten)?;
    let mut pings = 0u64;
    loop {
        let source = decode(&inbox[..len])?;
        let n = usize::try_from(source.len())?.min(MAX_SIZE);
        ch.read(Scatter::range(&mut data, 0..n)?, source)?;
        // Go ahead; the sink advertisement comes back.
        len = send_then_receive(&mut ch, &go_ahead, &mut inbox)?;
        let sink = decode(&inbox[..len])?;
        // rping writes the string it read, with its terminating zero.
        let text = data[..n].iter().position(|&b| b == 0).map_or(n, |z| z + 1);
        let w = text.min(usize::try_from(sink.len())?);
        ch.write(&[Gather::range(&data, 0..w)?], sink)?;
        pings += 1;
        // Go ahead; the next source advertisement, or the client is gone.
        match send_then_receive(&mut ch, &go_ahead, &mut inbox) {
            Ok(l) => len = l,
            Err(_) if ch.is_disconnected() => break,
            Err(e) => return Err(e.into()),
        }
    }
    println!("rping: server served {pings} pings to {peer}");
    Ok(())
}

/// `count` pings of `size` bytes to the server at `addr`, each checked.
fn client(addr: SocketAddr, count: u64, size: usize) -> Res {
    if !(16..=MAX_SIZE).contains(&size) {
        return Err(format!("size {size}: rping takes 16 to {MAX_SIZE}").into());
    }
    let connector = Connector::new().backend(Backend::Verbs);
    let started = Instant::now();
    let mut ch = loop {
        match connector.connect(addr, &[], WAIT) {
            Ok(c) => break c,
            Err(ConnectError::NotListening { .. }) if started.elapsed() < WAIT => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e.into()),
        }
    };
    let reg = ch.registry().clone();
    let mut source = reg.alloc(size, RegisterOptions::local().allow_remote_read())?;
    let sink = reg.alloc(size, RegisterOptions::local().allow_remote_write())?;
    let mut inbox = reg.alloc(INFO, RegisterOptions::local())?;
    let mut start = b'A';
    for ping in 0..count {
        fill(&mut source[..size], ping, start);
        start = if start >= b'z' { b'A' } else { start + 1 };
        let mut advert = reg.alloc(INFO, RegisterOptions::local())?;
        advert.copy_from_slice(&encode(source.registration().remote()?, size));
        let n = send_then_receive(&mut ch, &advert, &mut inbox)?;
        check_go_ahead(n)?;
        advert.copy_from_slice(&encode(sink.registration().remote()?, size));
        let n = send_then_receive(&mut ch, &advert, &mut inbox)?;
        check_go_ahead(n)?;
        // The server wrote before its go-ahead.
        if sink.to_vec()[..size] != source[..size] {
            return Err(format!("ping {ping}: the data came back changed").into());
        }
    }
    println!("rping: client sent {count} pings of {size} bytes to {addr}, all came back");
    Ok(())
}

fn check_go_ahead(n: usize) -> Res {
    if n != INFO {
        return Err(format!("a go-ahead of {n} bytes, not {INFO}").into());
    }
    Ok(())
}

/// rping's ping text: `rdma-ping-N: ` then letters from `start` on,
/// cycling `A`..=`z`, and a terminating zero.
fn fill(buf: &mut [u8], ping: u64, start: u8) {
    let head = format!("rdma-ping-{ping}: ");
    let size = buf.len();
    let cc = head.len().min(size);
    buf[..cc].copy_from_slice(&head.as_bytes()[..cc]);
    let mut c = start;
    for b in &mut buf[cc..] {
        *b = c;
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    buf[size - 1] = 0;
}
