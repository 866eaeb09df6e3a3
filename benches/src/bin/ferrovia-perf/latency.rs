//! Latency tests over the fastest path the API offers: busy polling
//! (`spin_poll`, `progress`), receives reposted in place, send handles
//! reaped off the timed path. Times are one way (half a round trip) for
//! writes and sends, the whole operation for reads and barriers, as in
//! perftest.

use std::time::Instant;

use ferrovia::prelude::*;
use ferrovia::{
    Gather, Node, NodeError, PeerReadWorkRequest, PeerReceiveWorkRequest, PeerSendWorkRequest,
    PeerWriteWorkRequest, PollingScope, ReadWorkRequest, ReceiveWorkRequest, RegisterOptions,
    Scatter, SendWorkRequest, TransportError, WriteWorkRequest,
};

use crate::WAIT;
use crate::args::Args;
use crate::flag::{self, Flag};

/// Runs latency test `args.test` at `size`; samples in µs.
pub(crate) fn run(node: &mut Node, size: usize, args: &Args) -> Result<Vec<f64>, NodeError> {
    let times = match args.test.as_str() {
        "write_lat" => write(node, size, args)?,
        "read_lat" => read(node, size, args)?,
        "send_lat" => send(node, size, args)?,
        "atomic_lat" => atomic(node, args)?,
        _ => barrier(node, args)?,
    };
    node.barrier(&[0, 1], WAIT)?;
    Ok(times)
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// RDMA-write ping-pong; each side spins on the last byte of its receive
/// buffer (atomic loads), like ib_write_lat, which each round's write
/// flips (`crate::flag`): two sources, one per value.
fn write(node: &mut Node, size: usize, args: &Args) -> Result<Vec<f64>, NodeError> {
    let (me, peer) = (node.rank(), 1 - node.rank());
    let opts = RegisterOptions::local().allow_remote_write();
    let inbox = node.registry().alloc(size, opts)?;
    // The sources of even and odd rounds.
    let mut even = node.registry().alloc(size, RegisterOptions::local())?;
    even.fill(flag::fill(0));
    let mut odd = node.registry().alloc(size, RegisterOptions::local())?;
    odd.fill(flag::fill(1));
    let remotes = node.all_gather_remote(inbox.registration().remote()?, WAIT)?;
    let flag = Flag::of(inbox.as_atomic_u64s()?, size);
    // Polls the transport every 16 looks at the flag: on UCX that drives
    // progress on this thread (the peer's write lands); on verbs it is
    // not needed, and a CQ poll per look would slow the loop under
    // emulation.
    let spin = |s: &mut PollingScope<'_, '_, Node>, round: usize| -> Result<(), TransportError> {
        let t = Instant::now();
        let mut looks = 0u32;
        while !flag.landed(round) {
            looks = looks.wrapping_add(1);
            if looks.is_multiple_of(16) {
                s.progress()?;
                if t.elapsed() > WAIT {
                    return Err(TransportError::Config(flag.never_arrived(round)));
                }
            }
            std::hint::spin_loop();
        }
        Ok(())
    };
    let mut times = Vec::with_capacity(args.iters);
    node.scope(|s| {
        let g = [[Gather::of(&even)?], [Gather::of(&odd)?]];
        let wrs = [
            PeerWriteWorkRequest::new(peer, WriteWorkRequest::new(&g[0], remotes[peer])?),
            PeerWriteWorkRequest::new(peer, WriteWorkRequest::new(&g[1], remotes[peer])?),
        ];
        for i in 0..args.iters {
            let t = Instant::now();
            if me == 1 {
                drop(s.post_write(wrs[i % 2])?);
                spin(s, i)?;
            } else {
                spin(s, i)?;
                drop(s.post_write(wrs[i % 2])?);
            }
            times.push(us(t) / 2.0);
            // Reap send completions off the timed path, in batches.
            if i % 32 == 31 {
                s.progress()?;
            }
        }
        Ok::<_, TransportError>(())
    })?;
    Ok(times)
}

/// Send ping-pong; each side keeps two receives posted, so reposting the
/// buffer a message just filled happens after the reply is on its way,
/// off the critical path, and the next message always finds a receive.
fn send(node: &mut Node, size: usize, args: &Args) -> Result<Vec<f64>, NodeError> {
    let (me, peer) = (node.rank(), 1 - node.rank());
    let src = node.registry().alloc(size, RegisterOptions::local())?;
    let mut inbox = node.registry().alloc(2 * size, RegisterOptions::local())?;
    let mut times = Vec::with_capacity(args.iters);
    node.scope(|s| {
        let g = [Gather::of(&src)?];
        let wr = PeerSendWorkRequest::new(peer, SendWorkRequest::new(&g)?);
        let (bytes, reg) = inbox.split_mut();
        let mut ring = std::collections::VecDeque::with_capacity(2);
        for slot in bytes.chunks_mut(size) {
            ring.push_back(s.post_receive(PeerReceiveWorkRequest::new(
                peer,
                ReceiveWorkRequest::new(Scatter::new(reg, slot)?),
            ))?);
        }
        s.barrier(&[0, 1], WAIT)?;
        for i in 0..args.iters {
            let t = Instant::now();
            if me == 1 {
                drop(s.post_send(wr)?);
            }
            let buf = ring
                .pop_front()
                .ok_or(TransportError::Config("no receive posted".into()))?
                .spin_poll()?
                .into_scatter()
                .ok_or(TransportError::Config("no buffer back".into()))?;
            if me == 0 {
                drop(s.post_send(wr)?);
            }
            times.push(us(t) / 2.0);
            // Messages left for this slot: the ring holds two.
            if i + 2 < args.iters {
                ring.push_back(s.post_receive(PeerReceiveWorkRequest::new(
                    peer,
                    ReceiveWorkRequest::new(buf),
                ))?);
            }
        }
        Ok::<_, NodeError>(())
    })?;
    Ok(times)
}

/// RDMA reads of the server's buffer by the client, one at a time.
fn read(node: &mut Node, size: usize, args: &Args) -> Result<Vec<f64>, NodeError> {
    let me = node.rank();
    let opts = RegisterOptions::local().allow_remote_read();
    let source = node.registry().alloc(size, opts)?;
    let remotes = node.all_gather_remote(source.registration().remote()?, WAIT)?;
    let mut times = Vec::with_capacity(args.iters);
    if me == 0 {
        // Keep `source` registered until the client is done, asleep.
        crate::passive::wait_for_client(node)?;
        return Ok(times);
    }
    let mut dst = node.registry().alloc(size, RegisterOptions::local())?;
    node.scope(|s| {
        let mut buf = Scatter::of(&mut dst)?;
        for _ in 0..args.iters {
            let t = Instant::now();
            let wr = PeerReadWorkRequest::new(0, ReadWorkRequest::new(buf, remotes[0])?);
            let done = s.post_read(wr)?.spin_poll()?;
            times.push(us(t));
            buf = done
                .into_scatter()
                .ok_or(TransportError::Config("no buffer back".into()))?;
        }
        Ok::<_, TransportError>(())
    })?;
    crate::passive::release_server(node)?;
    Ok(times)
}

/// Remote atomics on the server's word by the client, one at a time.
fn atomic(node: &mut Node, args: &Args) -> Result<Vec<f64>, NodeError> {
    let me = node.rank();
    let word = node
        .registry()
        .alloc(8, RegisterOptions::local().allow_remote_atomic())?;
    let remotes = node.all_gather_remote(word.registration().remote()?, WAIT)?;
    let mut times = Vec::with_capacity(args.iters);
    if me == 0 {
        crate::passive::wait_for_client(node)?;
        return Ok(times);
    }
    let mut result = node.registry().alloc(8, RegisterOptions::local())?;
    let kind = args.atomic;
    node.scope(|s| {
        let mut buf = Scatter::of(&mut result)?;
        for i in 0..args.iters as u64 {
            let t = Instant::now();
            let wr = crate::atomic_request(kind, buf, remotes[0], i)?;
            let done = s
                .post_atomic(PeerAtomicWorkRequest::new(0, wr))?
                .spin_poll()?;
            times.push(us(t));
            buf = done
                .into_scatter()
                .ok_or(TransportError::Config("no buffer back".into()))?;
        }
        Ok::<_, TransportError>(())
    })?;
    crate::passive::release_server(node)?;
    Ok(times)
}

/// Two-rank barriers.
fn barrier(node: &mut Node, args: &Args) -> Result<Vec<f64>, NodeError> {
    let mut times = Vec::with_capacity(args.iters);
    node.scope(|s| {
        for _ in 0..args.iters {
            let t = Instant::now();
            s.barrier(&[0, 1], WAIT)?;
            times.push(us(t));
        }
        Ok::<_, NodeError>(())
    })?;
    Ok(times)
}
