//! `ferrovia-rank pool-*`: the shared receive pool (issue 14), on a node
//! built with `shared_receives(DEPTH)`. Each rank prints what it saw; the
//! suite reads the lines.
//!
//! - `pool-exchange`: all-to-all, every message received from the pool,
//!   in order per sender, through `DEPTH` receive buffers however many
//!   peers there are.
//! - `pool-flood`: ranks 1.. send as fast as they can to rank 0, whose
//!   few receives are refilled slowly: nothing is lost.
//! - `pool-too-long`: rank 1 sends more than a pooled receive holds: rank
//!   0's error names rank 1, and rank 2's message still arrives.

use std::collections::VecDeque;
use std::time::Duration;

use ferrovia_channel::{
    Gather, PeerSendWorkRequest, ReceiveWorkRequest, Scatter, ScopedPendingWork, SendWorkRequest,
    TransportError, WorkDone,
};
use ferrovia_mr::{RegisterOptions, Registration};
use ferrovia_node::{Node, NodeError, NodeScope};

const WAIT: Duration = Duration::from_secs(60);
/// Bytes of a message: sender, sequence number, then a pattern.
pub(crate) const SLOT: usize = 64;

fn config(e: String) -> NodeError {
    NodeError::Transport(TransportError::Config(e))
}

/// Message `seq` from `from`.
fn message(from: usize, seq: u64) -> [u8; SLOT] {
    let mut m = [0u8; SLOT];
    m[..8].copy_from_slice(&(from as u64).to_le_bytes());
    m[8..16].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in m[16..].iter_mut().enumerate() {
        *b = (from as u64 * 31 + seq * 7 + i as u64) as u8;
    }
    m
}

/// Checks a completed pooled receive against its sender and the message
/// expected next from it; hands its buffer back, to post again.
fn take<'env>(
    done: WorkDone<'env>,
    reg: &'env Registration<'_>,
    next: &mut [u64],
) -> Result<(usize, Scatter<'env>), NodeError> {
    let peer = done
        .peer()
        .ok_or_else(|| config("a pooled receive named no sender".into()))?;
    let len = done.byte_len();
    let buf = done
        .into_buffer()
        .ok_or_else(|| config("a receive handed back no buffer".into()))?;
    let want = message(peer, next[peer]);
    if len != SLOT || buf[..] != want[..] {
        let seq = u64::from_le_bytes(buf[8..16].try_into().unwrap_or_default());
        return Err(config(format!(
            "from rank {peer}: {len} bytes, sequence {seq}, expected its message {}",
            next[peer]
        )));
    }
    next[peer] += 1;
    Ok((peer, Scatter::new(reg, buf)?))
}

/// All-to-all through the pool: `msgs` messages to every other rank.
pub(crate) fn exchange(node: &mut Node, depth: usize, msgs: u64) -> Result<(), NodeError> {
    let (me, n) = (node.rank(), node.world_size());
    let others: Vec<usize> = (0..n).filter(|&p| p != me).collect();
    let all: Vec<usize> = (0..n).collect();
    let before = node.registry().stats().registered_bytes;
    let mut inbox = node
        .registry()
        .alloc(depth * SLOT, RegisterOptions::local())?;
    let receive_bytes = node.registry().stats().registered_bytes - before;
    let outbox: Vec<u8> = (0..msgs).flat_map(|seq| message(me, seq)).collect();
    let outbox = node
        .registry()
        .register_buffer(outbox, RegisterOptions::local())?;
    let expected = msgs * others.len() as u64;
    let next = node.scope(|s| {
        let (bytes, reg) = inbox.split_mut();
        let mut ring = VecDeque::with_capacity(depth);
        // No more receives than messages: a receive left over would keep
        // the scope's end waiting.
        for chunk in bytes.chunks_mut(SLOT).take(expected as usize) {
            ring.push_back(s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, chunk)?))?);
        }
        s.barrier(&all, WAIT)?; // every pool is stocked
        let gathers: Vec<[Gather<'_>; 1]> = (0..msgs as usize)
            .map(|i| Ok([Gather::range(&outbox, i * SLOT..(i + 1) * SLOT)?]))
            .collect::<Result<_, NodeError>>()?;
        // All sends go out at once; they complete as the peers' pools take
        // them (receiver-not-ready retries in between).
        let mut sends = Vec::with_capacity(gathers.len() * others.len());
        for g in &gathers {
            for &p in &others {
                sends.push(s.post_send(PeerSendWorkRequest::new(p, SendWorkRequest::new(g)?))?);
            }
        }
        let mut next = vec![0u64; n];
        let mut posted = ring.len() as u64;
        for _ in 0..expected {
            let h = ring
                .pop_front()
                .ok_or_else(|| config("the pool ran dry".into()))?;
            let (_, again) = take(h.wait(WAIT)?, reg, &mut next)?;
            if posted < expected {
                ring.push_back(s.post_receive_any(ReceiveWorkRequest::new(again))?);
                posted += 1;
            }
        }
        for h in sends {
            h.wait(WAIT)?;
        }
        Ok::<_, NodeError>(next)
    })?;
    for &p in &others {
        if next[p] != msgs {
            return Err(config(format!(
                "{} of {msgs} messages from rank {p}",
                next[p]
            )));
        }
    }
    node.barrier(&all, WAIT)?;
    println!(
        "rank {me}: received {expected} messages from {} peers in order through {depth} pooled receives; receive buffers registered: {receive_bytes} bytes",
        others.len()
    );
    Ok(())
}

/// Ranks 1.. send `msgs` each to rank 0 as fast as their send queues
/// allow; rank 0 refills its `depth` receives slowly, its limit armed.
pub(crate) fn flood(node: &mut Node, depth: usize, msgs: u64) -> Result<(), NodeError> {
    let (me, n) = (node.rank(), node.world_size());
    let all: Vec<usize> = (0..n).collect();
    if me != 0 {
        let outbox: Vec<u8> = (0..msgs).flat_map(|seq| message(me, seq)).collect();
        let outbox = node
            .registry()
            .register_buffer(outbox, RegisterOptions::local())?;
        node.scope(|s| {
            s.barrier(&all, WAIT)?;
            let gathers: Vec<[Gather<'_>; 1]> = (0..msgs as usize)
                .map(|i| Ok([Gather::range(&outbox, i * SLOT..(i + 1) * SLOT)?]))
                .collect::<Result<_, NodeError>>()?;
            let mut sends = VecDeque::new();
            for g in &gathers {
                if sends.len() == 64 {
                    let h: ScopedPendingWork<'_, '_> =
                        sends.pop_front().ok_or_else(|| config("no send".into()))?;
                    h.wait(WAIT)?;
                }
                sends
                    .push_back(s.post_send(PeerSendWorkRequest::new(0, SendWorkRequest::new(g)?))?);
            }
            for h in sends {
                h.wait(WAIT)?;
            }
            Ok::<_, NodeError>(())
        })?;
        node.barrier(&all, WAIT)?;
        return Ok(());
    }
    let mut inbox = node
        .registry()
        .alloc(depth * SLOT, RegisterOptions::local())?;
    let expected = msgs * (n as u64 - 1);
    let (next, limits) = node.scope(|s| {
        let (bytes, reg) = inbox.split_mut();
        let mut ring = VecDeque::with_capacity(depth);
        // No more receives than messages: a receive left over would keep
        // the scope's end waiting.
        for chunk in bytes.chunks_mut(SLOT).take(expected as usize) {
            ring.push_back(s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, chunk)?))?);
        }
        let low = (depth / 4).max(1) as u32;
        s.arm_shared_limit(low)?;
        s.barrier(&all, WAIT)?; // the senders start
        let mut next = vec![0u64; n];
        let mut limits = 0;
        let mut posted = ring.len() as u64;
        for _ in 0..expected {
            let h = ring
                .pop_front()
                .ok_or_else(|| config("the pool ran dry".into()))?;
            let (_, again) = take(h.wait(WAIT)?, reg, &mut next)?;
            // A slow refill: the senders outrun it.
            std::thread::sleep(Duration::from_micros(300));
            if s.shared_limit_reached()? {
                limits += 1;
                s.arm_shared_limit(low)?;
            }
            if posted < expected {
                ring.push_back(s.post_receive_any(ReceiveWorkRequest::new(again))?);
                posted += 1;
            }
        }
        Ok::<_, NodeError>((next, limits))
    })?;
    if let Some((p, got)) = next
        .iter()
        .enumerate()
        .skip(1)
        .find(|&(_, &got)| got != msgs)
    {
        return Err(config(format!("{got} of {msgs} messages from rank {p}")));
    }
    node.barrier(&all, WAIT)?;
    println!(
        "rank 0: flood of {expected} messages through {depth} pooled receives: none lost, in order; limit event {limits} time(s)"
    );
    Ok(())
}

/// Rank 1 sends twice what a pooled receive holds; rank 2 a message
/// that fits. Rank 0 reports both.
/// Messages rank 1 sends after its long one in `pool-too-long`.
const LATER: usize = 50;

pub(crate) fn too_long(node: &mut Node) -> Result<(), NodeError> {
    let me = node.rank();
    if node.world_size() != 3 {
        return Err(config("pool-too-long needs 3 ranks".into()));
    }
    match me {
        0 => {
            let mut inbox = node.registry().alloc(2 * SLOT, RegisterOptions::local())?;
            let (first, second) = node.scope(|s| {
                let (bytes, reg) = inbox.split_mut();
                let (a, b) = bytes.split_at_mut(SLOT);
                // The barrier before the receive: rank 1 sends as soon as
                // it leaves the barrier, and its message, once it lands
                // in a receive, breaks this rank's connection to it, which
                // would fail a barrier this rank is still in. Until the
                // receive is posted the message waits (UCX's unexpected
                // queue; receiver-not-ready retries on verbs).
                s.barrier(&[0, 1, 2], WAIT)?;
                let first = s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, a)?))?;
                let first = first
                    .wait(WAIT)
                    .map(|d| d.peer())
                    .map_err(|e| e.to_string());
                // The pool takes the next message (rank 2's) in the other.
                let second = s.post_receive_any(ReceiveWorkRequest::new(Scatter::new(reg, b)?))?;
                s.barrier(&[0, 2], WAIT)?;
                let done = second.wait(WAIT)?;
                let from = done.peer();
                let ok = done
                    .into_received()
                    .is_some_and(|got| *got == message(2, 0));
                Ok::<_, NodeError>((first, (from, ok)))
            })?;
            println!("rank 0: the long message: {first:?}");
            println!("rank 0: then from {:?}, intact: {}", second.0, second.1);
            println!(
                "rank 0: messages of broken connections dropped: {}",
                node.stale_dropped()
            );
            node.barrier(&[0, 2], WAIT)?;
        }
        1 => {
            let long = node
                .registry()
                .register_buffer(vec![7u8; 2 * SLOT], RegisterOptions::local())?;
            node.barrier(&[0, 1, 2], WAIT)?;
            let sent = node.scope(|s| {
                let g = [Gather::of(&long)?];
                s.post_send(PeerSendWorkRequest::new(0, SendWorkRequest::new(&g)?))?
                    .wait(WAIT)?;
                Ok::<_, NodeError>(())
            });
            println!(
                "rank 1: the long send: {:?}",
                sent.map_err(|e| e.to_string())
            );
            // More after it: the connection is broken, so none may reach
            // rank 0's pool (they fail here, or rank 0 drops them).
            let later = node
                .registry()
                .register_buffer(message(1, 0).to_vec(), RegisterOptions::local())?;
            let mut failed = 0;
            for _ in 0..LATER {
                let r = node.scope(|s| {
                    let g = [Gather::of(&later)?];
                    s.post_send(PeerSendWorkRequest::new(0, SendWorkRequest::new(&g)?))?
                        .wait(WAIT)?;
                    Ok::<_, NodeError>(())
                });
                failed += usize::from(r.is_err());
            }
            println!("rank 1: {failed} of {LATER} later sends failed");
            node.barrier(&[1, 2], WAIT)?; // they are out before rank 2's
        }
        _ => {
            let msg = node
                .registry()
                .register_buffer(message(2, 0).to_vec(), RegisterOptions::local())?;
            node.barrier(&[0, 1, 2], WAIT)?;
            node.barrier(&[1, 2], WAIT)?; // rank 1's later sends are out
            node.scope(|s| {
                s.barrier(&[0, 2], WAIT)?; // rank 0's second receive is posted
                let g = [Gather::of(&msg)?];
                s.post_send(PeerSendWorkRequest::new(0, SendWorkRequest::new(&g)?))?
                    .wait(WAIT)?;
                Ok::<_, NodeError>(())
            })?;
            node.barrier(&[0, 2], WAIT)?;
        }
    }
    Ok(())
}
