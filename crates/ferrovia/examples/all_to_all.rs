//! All-to-all with scatter and gather posts: every rank sends a distinct
//! message to every other rank and receives one from each. `cargo run
//! --example all_to_all` starts 4 ranks on this machine (over UCX without
//! RDMA hardware); on soft-RoCE: `cargo xtask vm -- cargo run --example
//! all_to_all`; under torchrun, srun or mpirun each process is one rank.

use std::error::Error;
use std::time::Duration;

use ferrovia::prelude::*;
use ferrovia::{
    Gather, Node, PeerReceiveWorkRequest, PeerSendWorkRequest, ReceiveWorkRequest, RegisterOptions,
    Scatter, SendWorkRequest,
};

type Res<T = ()> = Result<T, Box<dyn Error>>;
const WAIT: Duration = Duration::from_secs(30);
const SLOT: usize = 32;

fn message(from: usize, to: usize) -> [u8; SLOT] {
    let mut m = [0u8; SLOT];
    let text = format!("{from} -> {to}");
    m[..text.len()].copy_from_slice(text.as_bytes());
    m
}

fn main() -> Res {
    // Spans and events on stderr as RUST_LOG filters them (unset: errors).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut node = Node::from_env_or_launch(4)?;
    let (me, n) = (node.rank(), node.world_size());
    let others: Vec<usize> = (0..n).filter(|&p| p != me).collect();
    let outgoing: Vec<u8> = (0..n).flat_map(|p| message(me, p)).collect();
    let out = node
        .registry()
        .register_buffer(outgoing, RegisterOptions::local())?;
    let mut inbox = node.registry().alloc(n * SLOT, RegisterOptions::local())?;
    let everyone: Vec<usize> = (0..n).collect();
    node.scope(|s| -> Res {
        let (bytes, reg) = inbox.split_mut();
        let mut slots: Vec<Option<&mut [u8]>> = bytes.chunks_mut(SLOT).map(Some).collect();
        let mut recvs = Vec::new();
        for &p in &others {
            let slot = slots[p].take().ok_or("slot taken twice")?;
            recvs.push(PeerReceiveWorkRequest::new(
                p,
                ReceiveWorkRequest::new(Scatter::new(reg, slot)?),
            ));
        }
        let received = s.post_gather_receive(recvs)?;
        s.barrier(&everyone, WAIT)?; // every receive is posted before anyone sends
        let gathers: Vec<[Gather<'_>; 1]> = (0..n)
            .map(|p| Gather::range(&out, p * SLOT..(p + 1) * SLOT).map(|g| [g]))
            .collect::<Result<_, _>>()?;
        let mut sends = Vec::new();
        for &p in &others {
            sends.push(PeerSendWorkRequest::new(
                p,
                SendWorkRequest::new(&gathers[p])?,
            ));
        }
        for h in s.post_scatter_send(sends)? {
            h.wait(WAIT)?;
        }
        for (h, &p) in received.into_iter().zip(&others) {
            let got = h.wait(WAIT)?.into_received().unwrap_or_default();
            assert_eq!(got, &message(p, me)[..], "message from rank {p}");
        }
        Ok(())
    })?;
    node.barrier(&everyone, WAIT)?;
    println!(
        "all_to_all: rank {me} of {n} received a verified message from each of {} peers",
        others.len()
    );
    Ok(())
}
