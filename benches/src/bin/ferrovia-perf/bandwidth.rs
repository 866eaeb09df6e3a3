//! Bandwidth tests: the client keeps the send queue full (tx depth, post
//! lists of 16 with one doorbell and selective signalling for writes and
//! sends, a ring of reads reposted as each completes); the server only
//! takes part (receives for `send_bw`) and meets the client at a barrier.

use std::collections::VecDeque;
use std::time::Instant;

use ferrovia::prelude::*;
use ferrovia::{
    Gather, Node, NodeError, PeerAtomicWorkRequest, PeerReadWorkRequest, PeerReceiveWorkRequest,
    ReadWorkRequest, ReceiveWorkRequest, RegisterOptions, Scatter, ScopedPendingWork,
    SendWorkRequest, TransportError, WriteWorkRequest,
};

use crate::WAIT;
use crate::args::Args;

/// At most this much memory for rings of receive or read buffers (more
/// would measure DRAM, not the transport: perftest reuses one buffer).
const RING_BYTES: usize = 8 << 20;

/// What the client measured for one size.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Measured {
    pub(crate) bytes: f64,
    /// When the client's clock started and stopped (several QPs: the
    /// aggregate spans the earliest start to the latest end).
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    /// Best rate over a window of operations, MB/s.
    pub(crate) peak: f64,
}

/// Slots of a ring of `size`-byte buffers for `args`.
fn ring_slots(size: usize, args: &Args) -> usize {
    args.tx_depth
        .min(args.iters)
        .min((RING_BYTES / size).max(1))
}

/// Rates over windows of completions.
struct Peak {
    last: Instant,
    count: usize,
    best: f64,
    size: usize,
    window: usize,
}

impl Peak {
    /// Windows of a full send queue (`tx_depth` operations) and a tenth of
    /// the run at least: shorter ones measure bursts of completions, not
    /// the link.
    fn new(size: usize, args: &Args) -> Peak {
        Peak {
            last: Instant::now(),
            count: 0,
            best: 0.0,
            size,
            window: args.tx_depth.max(args.post_list).max(args.iters / 10),
        }
    }

    fn completed(&mut self, n: usize) {
        self.count += n;
        if self.count >= self.window {
            let dt = self.last.elapsed().as_secs_f64();
            self.best = self
                .best
                .max((self.count * self.size) as f64 / dt / crate::report::MB);
            self.count = 0;
            self.last = Instant::now();
        }
    }
}

/// Runs bandwidth test `args.test` at `size`; the client's measurement.
pub(crate) fn run(
    node: &mut Node,
    size: usize,
    args: &Args,
) -> Result<Option<Measured>, NodeError> {
    let me = node.rank();
    let opts = RegisterOptions::local()
        .allow_remote_write()
        .allow_remote_read();
    let opts = if args.test == "atomic_bw" {
        opts.allow_remote_atomic()
    } else {
        opts
    };
    let target = node.registry().alloc(size, opts)?;
    let remotes = node.all_gather_remote(target.registration().remote()?, WAIT)?;
    let both = [0, 1];
    let result = match (args.test.as_str(), me) {
        ("send_bw", 0) => {
            receive_ring(node, size, args)?;
            None
        }
        (_, 0) => {
            crate::passive::wait_for_client(node)?;
            node.barrier(&both, WAIT)?;
            return Ok(None);
        }
        ("write_bw", _) => Some(write(node, size, args, remotes[0])?),
        ("read_bw", _) => Some(read(node, size, args, remotes[0])?),
        ("atomic_bw", _) => Some(atomic(node, args, remotes[0])?),
        _ => Some(send(node, size, args)?),
    };
    let end = Instant::now();
    if me == 1 && args.test != "send_bw" {
        crate::passive::release_server(node)?;
    }
    node.barrier(&both, WAIT)?;
    Ok(result.map(|(ops, peak, start)| Measured {
        bytes: (ops * size) as f64,
        start,
        end,
        peak,
    }))
}

/// Lists of `post_list` posts (one doorbell, last signalled), `tx_depth` in
/// flight; `post` posts one list and returns its last handle.
fn pipeline<'scope, 'env>(
    size: usize,
    args: &Args,
    mut post: impl FnMut() -> Result<ScopedPendingWork<'scope, 'env>, TransportError>,
) -> Result<(usize, f64), TransportError> {
    let list = args.post_list;
    let lists = args.iters.div_ceil(list);
    let in_flight = (args.tx_depth / list).max(1);
    let mut peak = Peak::new(size, args);
    let mut pending = VecDeque::new();
    for _ in 0..lists {
        if pending.len() >= in_flight
            && let Some(h) = pending.pop_front()
        {
            let h: ScopedPendingWork<'_, '_> = h;
            h.spin_poll()?;
            peak.completed(list);
        }
        pending.push_back(post()?);
    }
    for h in pending {
        h.spin_poll()?;
    }
    Ok((lists * list, peak.best))
}

fn write(
    node: &mut Node,
    size: usize,
    args: &Args,
    remote: ferrovia::RemoteMemoryRegion,
) -> Result<(usize, f64, Instant), NodeError> {
    let src = node.registry().alloc(size, RegisterOptions::local())?;
    // The clock starts once the buffers are registered.
    let start = Instant::now();
    let (ops, peak) = node.scope(|s| {
        let g = [Gather::of(&src)?];
        let wrs = vec![WriteWorkRequest::new(&g, remote)?; args.post_list];
        pipeline(size, args, || s.post_write_list(0, &wrs))
    })?;
    Ok((ops, peak, start))
}

fn send(node: &mut Node, size: usize, args: &Args) -> Result<(usize, f64, Instant), NodeError> {
    let src = node.registry().alloc(size, RegisterOptions::local())?;
    let start = Instant::now();
    let (ops, peak) = node.scope(|s| {
        // The server's receives are posted once it reaches this barrier.
        s.barrier(&[0, 1], WAIT)?;
        let g = [Gather::of(&src)?];
        let wrs = vec![SendWorkRequest::new(&g)?; args.post_list];
        pipeline(size, args, || s.post_send_list(0, &wrs)).map_err(NodeError::from)
    })?;
    Ok((ops, peak, start))
}

/// The `send_bw` server: a ring of receives, reposted as each completes.
fn receive_ring(node: &mut Node, size: usize, args: &Args) -> Result<(), NodeError> {
    let slots = ring_slots(size, args);
    let total = args.iters.div_ceil(args.post_list) * args.post_list;
    let mut ring = node
        .registry()
        .alloc(slots * size, RegisterOptions::local())?;
    node.scope(|s| {
        let (bytes, reg) = ring.split_mut();
        let mut pending = VecDeque::new();
        for chunk in bytes.chunks_mut(size).take(total) {
            pending.push_back(s.post_receive(PeerReceiveWorkRequest::new(
                1,
                ReceiveWorkRequest::new(Scatter::new(reg, chunk)?),
            ))?);
        }
        s.barrier(&[0, 1], WAIT)?;
        let mut received = 0;
        while let Some(h) = pending.pop_front() {
            // Busy-polls, as perftest's send_bw server does.
            let done = h.spin_poll()?;
            received += 1;
            if received + pending.len() < total
                && let Some(again) = done.into_scatter()
            {
                pending.push_back(s.post_receive(PeerReceiveWorkRequest::new(
                    1,
                    ReceiveWorkRequest::new(again),
                ))?);
            }
        }
        Ok::<_, NodeError>(())
    })?;
    Ok(())
}

fn read(
    node: &mut Node,
    size: usize,
    args: &Args,
    remote: ferrovia::RemoteMemoryRegion,
) -> Result<(usize, f64, Instant), NodeError> {
    let slots = ring_slots(size, args);
    let mut ring = node
        .registry()
        .alloc(slots * size, RegisterOptions::local())?;
    let start = Instant::now();
    let (ops, peak) = node.scope(|s| {
        let (bytes, reg) = ring.split_mut();
        let mut pending = VecDeque::new();
        let mut posted = 0;
        for chunk in bytes.chunks_mut(size) {
            let wr = ReadWorkRequest::new(Scatter::new(reg, chunk)?, remote)?;
            pending.push_back(s.post_read(PeerReadWorkRequest::new(0, wr))?);
            posted += 1;
        }
        let mut peak = Peak::new(size, args);
        while let Some(h) = pending.pop_front() {
            let done = h.spin_poll()?;
            peak.completed(1);
            if posted < args.iters
                && let Some(again) = done.into_scatter()
            {
                let wr = ReadWorkRequest::new(again, remote)?;
                pending.push_back(s.post_read(PeerReadWorkRequest::new(0, wr))?);
                posted += 1;
            }
        }
        Ok::<_, TransportError>((posted, peak.best))
    })?;
    Ok((ops, peak, start))
}

/// A ring of remote atomics on the server's word, `tx_depth` in flight,
/// each result buffer reposted as its atomic completes.
fn atomic(
    node: &mut Node,
    args: &Args,
    remote: ferrovia::RemoteMemoryRegion,
) -> Result<(usize, f64, Instant), NodeError> {
    let slots = args.tx_depth.min(args.iters);
    let mut ring = node.registry().alloc(slots * 8, RegisterOptions::local())?;
    let kind = args.atomic;
    let start = Instant::now();
    let (ops, peak) = node.scope(|s| {
        let (bytes, reg) = ring.split_mut();
        let mut pending = VecDeque::new();
        let mut posted = 0u64;
        for chunk in bytes.chunks_mut(8) {
            let wr = crate::atomic_request(kind, Scatter::new(reg, chunk)?, remote, posted)?;
            pending.push_back(s.post_atomic(PeerAtomicWorkRequest::new(0, wr))?);
            posted += 1;
        }
        let mut peak = Peak::new(8, args);
        while let Some(h) = pending.pop_front() {
            let done = h.spin_poll()?;
            peak.completed(1);
            if (posted as usize) < args.iters
                && let Some(again) = done.into_scatter()
            {
                let wr = crate::atomic_request(kind, again, remote, posted)?;
                pending.push_back(s.post_atomic(PeerAtomicWorkRequest::new(0, wr))?);
                posted += 1;
            }
        }
        Ok::<_, TransportError>((posted as usize, peak.best))
    })?;
    Ok((ops, peak, start))
}
