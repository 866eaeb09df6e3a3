//! A server accepting clients by address: each client sends its name with
//! its connection request; the server answers with where the client may
//! RDMA-write a greeting (a `RemoteMemoryRegion` in the answer's private
//! data), reads the greeting once the client says it is done, and thanks
//! it. Over verbs through the RDMA connection manager, over UCX through
//! its listener: the same program.
//!
//! ```sh
//! cargo run --example accept_clients                        # a server and 3 client processes here
//! cargo run --example accept_clients -- serve 0.0.0.0:7471 2
//! cargo run --example accept_clients -- connect 192.0.2.1:7471 alice
//! ```
//! With no arguments the server listens on every address, and starts its
//! clients against this host's address for the backend in use (verbs: the
//! RDMA device's IPv4 address; UCX: loopback).

use std::error::Error;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use ferrovia::{
    Channel, ConnectError, Gather, Listener, RegisterOptions, RemoteMemoryRegion, Scatter,
};

const WAIT: Duration = Duration::from_secs(20);
const BOARD: usize = 64;

fn main() -> Result<(), Box<dyn Error>> {
    // Spans and events on stderr as RUST_LOG filters them (unset: errors).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => launch(3),
        ["serve", addr] => serve(&Listener::bind(addr.parse()?)?, 1),
        ["serve", addr, n] => serve(&Listener::bind(addr.parse()?)?, n.parse()?),
        ["connect", addr, name] => client(addr.parse()?, name),
        _ => Err("usage: accept_clients [serve ADDR [N] | connect ADDR NAME]".into()),
    }
}

/// A server on every address, and `n` client processes of this program.
fn launch(n: usize) -> Result<(), Box<dyn Error>> {
    let listener = Listener::bind("0.0.0.0:0".parse()?)?;
    let ip = ferrovia::node::local_ip(listener.backend())
        .ok_or("no address of this host for the backend in use")?;
    let addr = SocketAddr::new(ip, listener.local_addr().port());
    let me = std::env::current_exe()?;
    let clients = (0..n)
        .map(|i| {
            Command::new(&me)
                .args(["connect", &addr.to_string(), &format!("client-{i}")])
                .spawn()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let served = serve(&listener, n);
    for mut c in clients {
        if !c.wait()?.success() {
            return Err("a client failed".into());
        }
    }
    served
}

/// Accepts `n` clients as they come, then serves each.
fn serve(listener: &Listener, n: usize) -> Result<(), Box<dyn Error>> {
    let mut clients = Vec::new();
    while clients.len() < n {
        let incoming = listener.accept(WAIT)?;
        let name = String::from_utf8_lossy(incoming.private_data()).into_owned();
        if name.is_empty() {
            incoming.reject(b"say who you are")?;
            continue;
        }
        // Registered before accepting, so the answer can say where it is.
        let board = incoming
            .registry()
            .alloc(BOARD, RegisterOptions::local().allow_remote_write())?;
        let answer = board.registration().remote()?.encode();
        let channel = incoming.accept(&answer, WAIT)?;
        clients.push((name, channel, board));
    }
    let mut names = Vec::new();
    for (name, channel, board) in &mut clients {
        let done = receive(channel)?;
        assert_eq!(done, b"done");
        // The client wrote before it said so: the greeting is there.
        let bytes = board.to_vec(); // peers write it: copy out
        let greeting =
            String::from_utf8_lossy(&bytes[..bytes.iter().position(|&b| b == 0).unwrap_or(BOARD)])
                .into_owned();
        if greeting != format!("hello from {name}") {
            return Err(format!("{name} wrote {greeting:?} on its board").into());
        }
        let thanks = channel.registry().register_buffer(
            format!("thanks, {name}").into_bytes(),
            RegisterOptions::local(),
        )?;
        channel.send(&[Gather::of(&thanks)?])?;
        names.push(format!("{name} ({greeting:?})"));
    }
    names.sort();
    println!(
        "accept_clients: server on {} ({}) served {} clients: {}",
        listener.local_addr(),
        listener.backend(),
        clients.len(),
        names.join(", ")
    );
    Ok(())
}

/// Connects as `name` (retrying while nothing listens yet, for a server
/// that starts at about the same time), writes a greeting where the
/// server said, and waits for its thanks.
fn client(addr: SocketAddr, name: &str) -> Result<(), Box<dyn Error>> {
    let started = Instant::now();
    let mut channel = loop {
        match ferrovia::node::connect(addr, name.as_bytes(), WAIT) {
            Ok(c) => break c,
            Err(ConnectError::NotListening { .. } | ConnectError::Unreachable { .. })
                if started.elapsed() < WAIT =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e.into()),
        }
    };
    let board = RemoteMemoryRegion::decode(channel.peer_private_data())?;
    let greeting = channel.registry().register_buffer(
        format!("hello from {name}").into_bytes(),
        RegisterOptions::local(),
    )?;
    channel.write(&[Gather::of(&greeting)?], board)?;
    let done = channel
        .registry()
        .register_buffer(b"done".to_vec(), RegisterOptions::local())?;
    channel.send(&[Gather::of(&done)?])?;
    let thanks = receive(&mut channel)?;
    println!(
        "accept_clients: {name} connected to {addr}, got {:?}",
        String::from_utf8_lossy(&thanks)
    );
    Ok(())
}

/// One message from the peer.
fn receive(channel: &mut Channel) -> Result<Vec<u8>, Box<dyn Error>> {
    let mut buf = channel
        .registry()
        .register_buffer(vec![0u8; 64], RegisterOptions::local())?;
    let n = channel.receive(Scatter::of(&mut buf)?)?;
    Ok(buf[..n].to_vec())
}
