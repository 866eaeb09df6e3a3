//! Ping-pong between two ranks: the smallest ferrovia program.
//!
//! `cargo run --example ping_pong` starts both ranks on this machine (over
//! UCX when there is no RDMA device); on soft-RoCE:
//! `cargo xtask vm -- cargo run --example ping_pong`; under a launcher
//! (torchrun, srun, mpirun) each process is one rank.

use std::error::Error;
use std::time::{Duration, Instant};

use ferrovia::{
    Gather, Node, PeerReceiveWorkRequest, PeerSendWorkRequest, ReceiveWorkRequest, RegisterOptions,
    Scatter, SendWorkRequest,
};

type Res<T = ()> = Result<T, Box<dyn Error>>;
const ROUNDS: usize = 1000;
const WAIT: Duration = Duration::from_secs(10);

fn main() -> Res {
    // Spans and events on stderr as RUST_LOG filters them (unset: errors).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut node = Node::from_env_or_launch(2)?;
    let me = node.rank();
    let peer = 1 - me;
    let (text, expect): (&[u8], &[u8]) = if me == 0 {
        (b"ping", b"pong")
    } else {
        (b"pong", b"ping")
    };
    let ball = node
        .registry()
        .register_buffer(text.to_vec(), RegisterOptions::local())?;
    let mut catch = node.registry().alloc(16, RegisterOptions::local())?;
    node.barrier(&[0, 1], WAIT)?;
    let start = Instant::now();
    let g = [Gather::of(&ball)?];
    for round in 0..ROUNDS {
        // One scope per round: the receive buffer is borrowed until its
        // message is in, then free to read and to post again.
        node.scope(|s| -> Res {
            // Post the receive first, so the peer's message always finds it.
            let caught = s.post_receive(PeerReceiveWorkRequest::new(
                peer,
                ReceiveWorkRequest::new(Scatter::of(&mut catch)?),
            ))?;
            if me == 0 {
                s.post_send(PeerSendWorkRequest::new(peer, SendWorkRequest::new(&g)?))?
                    .wait(WAIT)?;
            }
            let got = caught.wait(WAIT)?.into_received().unwrap_or_default();
            if got != expect {
                return Err(format!("round {round}: got {got:?}").into());
            }
            if me == 1 {
                s.post_send(PeerSendWorkRequest::new(peer, SendWorkRequest::new(&g)?))?
                    .wait(WAIT)?;
            }
            Ok(())
        })?;
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64;
    println!(
        "ping_pong: rank {me}: {ROUNDS} round trips over {}, {us:.1} µs each, every message verified",
        node.describe()
    );
    Ok(())
}
