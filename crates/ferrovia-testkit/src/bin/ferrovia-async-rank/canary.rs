//! `canary ROUNDS`: reads and receives whose futures are dropped at
//! random points, or forgotten. Each target stays the engine's until its
//! completion, so buffers allocated right after (where an early free
//! would be reused) keep their canaries, and the targets come back with
//! the right bytes.

use std::future::Future;
use std::time::{Duration, Instant};

use ferrovia_async::AsyncNode;
use ferrovia_channel::OwnedBuf;
use ferrovia_mr::{RegisterOptions, RegisteredBuffer, RemoteMemoryRegion};
use ferrovia_node::Node;
use ferrovia_types::WcStatus;

use crate::{Error, WAIT, everyone, pattern};

const SIZE: usize = 1 << 16;
const MESSAGES: usize = 32;

/// Every rank's read source, shared before going async.
pub(crate) fn expose(node: &mut Node) -> Result<Vec<RemoteMemoryRegion>, Error> {
    let source = node
        .registry()
        .alloc(SIZE, RegisterOptions::local().allow_remote_read().shared())?;
    source.write_from(0, &pattern(SIZE, node.rank() as u64))?;
    let remotes = node.all_gather_remote(source.registration().remote()?, WAIT)?;
    // Peers read it until the job ends.
    std::mem::forget(source);
    Ok(remotes)
}

fn buf(node: &AsyncNode, fill: u8, len: usize) -> Result<RegisteredBuffer, Error> {
    Ok(node
        .registry()
        .register_buffer(vec![fill; len], RegisterOptions::local())?)
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

pub(crate) async fn run(
    node: AsyncNode,
    remotes: Vec<RemoteMemoryRegion>,
    rounds: usize,
) -> Result<(), Error> {
    let (me, n) = (node.rank(), node.world_size());
    let (to, from) = ((me + 1) % n, (me + n - 1) % n);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ me as u64);
    // Receives: the first half dropped at once (they still take the first
    // messages), the second half awaited.
    let mut kept = Vec::new();
    for i in 0..MESSAGES {
        let op = node.receive(from, buf(&node, 0, 16)?);
        if i < MESSAGES / 2 {
            drop(op);
        } else {
            kept.push(op);
        }
    }
    node.barrier(&everyone(&node), WAIT).await?;
    let mut canaries = Vec::new();
    let (mut forgotten, mut awaited) = (0, 0);
    for i in 0..rounds {
        let op = node.read(to, buf(&node, 0, SIZE)?, remotes[to]);
        match rng.below(4) {
            0 => drop(op),
            1 => {
                let waited = Duration::from_micros(rng.below(300));
                if let Ok(r) = tokio::time::timeout(waited, op).await {
                    if r?.bytes() != pattern(SIZE, to as u64) {
                        return Err("an awaited read brought other bytes".into());
                    }
                    awaited += 1;
                }
            }
            2 if i % 8 == 0 => {
                std::mem::forget(op);
                forgotten += 1;
            }
            _ => {
                let mut op = Box::pin(op);
                for _ in 0..rng.below(3) {
                    // A finished future is not polled again.
                    let finished = std::future::poll_fn(|cx| {
                        std::task::Poll::Ready(match op.as_mut().poll(cx) {
                            std::task::Poll::Ready(r) => Some(r),
                            std::task::Poll::Pending => None,
                        })
                    })
                    .await;
                    if let Some(r) = finished {
                        if r?.bytes() != pattern(SIZE, to as u64) {
                            return Err("a polled read brought other bytes".into());
                        }
                        awaited += 1;
                        break;
                    }
                }
                drop(op);
            }
        }
        canaries.push(buf(&node, 0xcc, SIZE)?);
        if i % 16 == 0 {
            // Messages for the peer's receives, dropped ones first.
            let k = i / 16;
            if k < MESSAGES {
                let mut msg = [0u8; 16];
                msg[0] = k as u8;
                msg[1] = me as u8;
                node.send(
                    to,
                    buf(&node, 0, 16).map(|mut b| {
                        b.copy_from_slice(&msg);
                        b
                    })?,
                )
                .await?;
            }
        }
    }
    for k in rounds.div_ceil(16)..MESSAGES {
        let mut b = buf(&node, 0, 16)?;
        b[0] = k as u8;
        b[1] = me as u8;
        node.send(to, b).await?;
    }
    // The kept receives take the second half, in order.
    for (i, op) in kept.into_iter().enumerate() {
        let got = tokio::time::timeout(WAIT, op).await??;
        if got.received()[..2] != [(MESSAGES / 2 + i) as u8, from as u8] {
            return Err(format!("kept receive {i} took {:?}", &got.received()[..2]).into());
        }
    }
    let start = Instant::now();
    while node.outstanding() > 0 && start.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if node.outstanding() > 0 {
        return Err(format!("{} dropped operations never completed", node.outstanding()).into());
    }
    if canaries.iter().any(|c| c.iter().any(|&b| b != 0xcc)) {
        return Err(
            "a read or receive landed in memory allocated after its future was dropped".into(),
        );
    }
    let back = node.take_returned();
    let mut messages = 0;
    for r in &back {
        let OwnedBuf::Plain(b) = &r.buf else {
            return Err("a target came back as another kind of buffer".into());
        };
        if r.completion.status != WcStatus::SUCCESS {
            return Err(format!("a dropped operation failed: {:?}", r.completion.status).into());
        }
        if b.len() == 16 {
            if b[..2] != [messages as u8, from as u8] {
                return Err(format!("dropped receive {messages} took {:?}", &b[..2]).into());
            }
            messages += 1;
        } else if b[..] != pattern(SIZE, to as u64)[..] {
            return Err("a dropped read brought other bytes".into());
        }
    }
    if messages != MESSAGES / 2 || back.len() - messages + awaited + forgotten != rounds {
        return Err(format!(
            "{} buffers came back ({messages} receives), {awaited} awaited, {forgotten} forgotten, of {rounds} reads",
            back.len()
        )
        .into());
    }
    node.barrier(&everyone(&node), WAIT).await?;
    println!(
        "canary ok rank {me}: {} dropped and {forgotten} forgotten of {rounds} reads, {messages} dropped receives; canaries intact",
        back.len() - messages
    );
    Ok(())
}
