//! The exchange of rdma-core's `rdma_server` / `rdma_client` (package
//! rdmacm-utils), so either side can be ferrovia and the other the C
//! program: the client connects through the RDMA connection manager with
//! no private data of its own, SENDs one 16-byte message, and waits for
//! the server's 16-byte answer; the server receives, answers, and
//! disconnects. Verbs only (the C programs speak nothing else).
//!
//! ```sh
//! cargo run --example rdma_message -- server 0.0.0.0:7471   # then: rdma_client -s ADDR
//! rdma_server &                                             # port 7471
//! cargo run --example rdma_message -- client 192.0.2.1:7471
//! ```
//! A ferrovia client frames its (empty) private data, which the C server
//! ignores; a ferrovia server hands the C client's unframed request area
//! over as it came ([`Incoming::private_data`](ferrovia::Incoming::private_data)).

use std::error::Error;
use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrovia::{
    Backend, Channel, ConnectError, Connector, Gather, Listener, ReceiveWorkRequest,
    RegisterOptions, Scatter, SendWorkRequest,
};

type Res<T = ()> = Result<T, Box<dyn Error>>;

/// The C programs' message size.
const MSG: usize = 16;
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
        ["client", addr] => client(addr.parse()?),
        _ => Err("usage: rdma_message server ADDR:PORT | client ADDR:PORT".into()),
    }
}

/// Accepts one client, receives its message, answers it.
fn server(addr: SocketAddr) -> Res {
    let listener = Listener::builder(addr).backend(Backend::Verbs).bind()?;
    println!("rdma_message: listening on {}", listener.local_addr());
    std::io::stdout().flush()?;
    let incoming = listener.accept(WAIT)?;
    let peer = incoming.peer_addr();
    let mut channel = incoming.accept(&[], WAIT)?;
    // The C client sends as soon as it is connected: until the receive
    // below is posted its send waits on receiver-not-ready retries (the
    // C programs ask for unlimited ones).
    let got = receive(&mut channel)?;
    let answer = channel
        .registry()
        .register_buffer(answer_to(&got).to_vec(), RegisterOptions::local())?;
    channel.send(&[Gather::of(&answer)?])?;
    println!(
        "rdma_message: server got {} bytes from {peer} and answered",
        got.len()
    );
    Ok(())
}

/// Connects (retrying while nothing listens yet), sends one message and
/// waits for the answer, the receive posted before the send.
fn client(addr: SocketAddr) -> Res {
    let connector = Connector::new().backend(Backend::Verbs);
    let started = Instant::now();
    let mut channel = loop {
        match connector.connect(addr, &[], WAIT) {
            Ok(c) => break c,
            Err(ConnectError::NotListening { .. }) if started.elapsed() < WAIT => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e.into()),
        }
    };
    let message: [u8; MSG] = *b"ferrovia says hi";
    let msg = channel
        .registry()
        .register_buffer(message.to_vec(), RegisterOptions::local())?;
    let mut answer = channel.registry().alloc(MSG, RegisterOptions::local())?;
    let len = channel.scope(|s| -> Result<usize, ferrovia::TransportError> {
        let received = s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut answer)?))?;
        let g = [Gather::of(&msg)?];
        s.post_send(SendWorkRequest::new(&g)?)?.wait(WAIT)?;
        Ok(received.wait(WAIT)?.byte_len())
    })?;
    if len != MSG {
        return Err(format!("the server answered {len} bytes, not {MSG}").into());
    }
    println!("rdma_message: client sent {MSG} bytes to {addr}, got {len} back");
    Ok(())
}

/// One message from the peer (at most [`MSG`] bytes).
fn receive(channel: &mut Channel) -> Res<Vec<u8>> {
    let mut buf = channel.registry().alloc(MSG, RegisterOptions::local())?;
    let n = channel.scope(|s| -> Result<usize, ferrovia::TransportError> {
        Ok(
            s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut buf)?))?
                .wait(WAIT)?
                .byte_len(),
        )
    })?;
    Ok(buf[..n].to_vec())
}

/// The answer: the message reversed, 16 bytes (the C client checks only
/// that it arrives).
fn answer_to(message: &[u8]) -> [u8; MSG] {
    let mut a = [0u8; MSG];
    for (d, s) in a.iter_mut().zip(message.iter().rev()) {
        *d = *s;
    }
    a
}
