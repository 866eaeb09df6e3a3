//! `--async` and `--async-busy`: the same tests through `ferrovia-async`
//! (futures owning their buffers, on a current-thread tokio runtime), to
//! set next to the scoped path. `--async` sleeps in the kernel on the
//! transport's event fd; `--async-busy` busy-polls (the scoped latency
//! tests busy-poll too). Every operation is signalled (no post lists).
//!
//! Every size uses a prefix of one region of the largest size, shared once
//! before the node goes async (`all_gather_remote` is a scoped call).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use ferrovia::asynchronous::AsyncNode;
use ferrovia::{AsyncConfig, Node, NodeError, RegisterOptions, RemoteMemoryRegion, SharedBuffer};

use crate::WAIT;
use crate::args::Args;
use crate::bandwidth::Measured;
use crate::flag::{self, Flag};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The node, async, and every rank's exposed region.
pub(crate) struct Bench {
    node: AsyncNode,
    exposed: SharedBuffer,
    remotes: Vec<RemoteMemoryRegion>,
}

impl Bench {
    pub(crate) fn new(mut node: Node, args: &Args) -> Result<Bench, NodeError> {
        let max = args.sizes.iter().copied().max().unwrap_or(8);
        let opts = RegisterOptions::local()
            .allow_remote_write()
            .allow_remote_read();
        let exposed = node.registry().alloc(max, opts)?;
        let remotes = node.all_gather_remote(exposed.registration().remote()?, WAIT)?;
        // The passive side of a one-sided bandwidth test sleeps, as the
        // scoped path's does: spinning would take the CPU the transport
        // (soft-RoCE, UCX's progress threads) needs.
        let passive = node.rank() == 0 && matches!(args.test.as_str(), "write_bw" | "read_bw");
        let cfg = if args.busy && !passive {
            AsyncConfig::default().busy_poll()
        } else {
            AsyncConfig::default()
        };
        let node = ferrovia::Async::with_config(node, cfg)
            .map_err(|e| ferrovia::BootstrapError::Protocol(e.to_string()))?;
        Ok(Bench {
            node,
            exposed,
            remotes,
        })
    }

    pub(crate) fn rank(&self) -> usize {
        self.node.rank()
    }

    pub(crate) fn describe(&self) -> String {
        self.node.describe()
    }

    fn remote(&self, peer: usize, size: usize) -> Res<RemoteMemoryRegion> {
        Ok(self.remotes[peer].sub_region(0, size as u64)?)
    }

    fn buf(&self, size: usize, fill: u8) -> Res<ferrovia::RegisteredBuffer> {
        Ok(self
            .node
            .registry()
            .register_buffer(vec![fill; size], RegisterOptions::local())?)
    }

    async fn both(&self) -> Res<()> {
        Ok(self.node.barrier(&[0, 1], WAIT).await?)
    }

    /// Latency samples (µs) of `args.test` at `size`.
    pub(crate) async fn latency(&self, size: usize, args: &Args) -> Res<Vec<f64>> {
        self.both().await?;
        let times = match args.test.as_str() {
            "write_lat" => self.write_lat(size, args).await?,
            "read_lat" => self.read_lat(size, args).await?,
            "send_lat" => self.send_lat(size, args).await?,
            _ => self.barrier_lat(args).await?,
        };
        self.both().await?;
        Ok(times)
    }

    /// RDMA-write ping-pong; each side watches the last byte of its region,
    /// which each round's write flips (`crate::flag`): two sources, one
    /// per value.
    async fn write_lat(&self, size: usize, args: &Args) -> Res<Vec<f64>> {
        let (me, peer) = (self.rank(), 1 - self.rank());
        let flag = Flag::of(self.exposed.as_atomic_u64s()?, size);
        // The region served earlier tests: round 0 finds the other value.
        flag.word.store(0, Relaxed);
        self.both().await?;
        let remote = self.remote(peer, size)?;
        let srcs = [
            Arc::new(self.buf(size, flag::fill(0))?),
            Arc::new(self.buf(size, flag::fill(1))?),
        ];
        let mut times = Vec::with_capacity(args.iters);
        let mut last_write = None;
        for i in 0..args.iters {
            let t = Instant::now();
            if me == 0 {
                arrived(&flag, i).await?;
            }
            let w = self.node.write(peer, srcs[i % 2].clone(), remote);
            if me == 1 {
                arrived(&flag, i).await?;
            }
            times.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
            // Off the timed path: the previous write completed long ago.
            if let Some(prev) = last_write.replace(w) {
                prev.await?;
            }
        }
        if let Some(w) = last_write {
            w.await?;
        }
        Ok(times)
    }

    /// Send ping-pong with two receives posted on each side.
    async fn send_lat(&self, size: usize, args: &Args) -> Res<Vec<f64>> {
        let (me, peer) = (self.rank(), 1 - self.rank());
        let mut ring = VecDeque::new();
        for _ in 0..2 {
            ring.push_back(self.node.receive(peer, self.buf(size, 0)?));
        }
        self.both().await?;
        let mut src = Some(self.buf(size, 1)?);
        let mut times = Vec::with_capacity(args.iters);
        for i in 0..args.iters {
            let t = Instant::now();
            let mut sent = None;
            if me == 1 {
                sent = Some(self.node.send(peer, src.take().ok_or("source")?));
            }
            let got = ring.pop_front().ok_or("no receive")?.await?;
            if me == 0 {
                sent = Some(self.node.send(peer, src.take().ok_or("source")?));
            }
            times.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
            // Off the timed path: the send's buffer back, the receive again.
            if let Some(s) = sent {
                src = Some(s.await?.into_buf());
            }
            if i + 2 < args.iters {
                ring.push_back(self.node.receive(peer, got.into_buf()));
            }
        }
        Ok(times)
    }

    /// The client reads the server's region, one read at a time.
    async fn read_lat(&self, size: usize, args: &Args) -> Res<Vec<f64>> {
        let mut times = Vec::with_capacity(args.iters);
        if self.rank() == 1 {
            let remote = self.remote(0, size)?;
            let mut dst = self.buf(size, 0)?;
            for _ in 0..args.iters {
                let t = Instant::now();
                dst = self.node.read(0, dst, remote).await?.into_buf();
                times.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        Ok(times)
    }

    async fn barrier_lat(&self, args: &Args) -> Res<Vec<f64>> {
        let mut times = Vec::with_capacity(args.iters);
        for _ in 0..args.iters {
            let t = Instant::now();
            self.both().await?;
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(times)
    }

    /// The client keeps `tx_depth` operations in flight; the server takes
    /// part in `send_bw` (receives) and otherwise waits in a receive.
    pub(crate) async fn bandwidth(&self, size: usize, args: &Args) -> Res<Option<Measured>> {
        self.both().await?;
        let depth = args.tx_depth.max(1);
        let mut measured = None;
        if self.rank() == 0 {
            let receives = if args.test == "send_bw" {
                args.iters
            } else {
                1
            };
            let mut ring = VecDeque::new();
            for _ in 0..depth.min(receives) {
                ring.push_back(self.node.receive(1, self.buf(size, 0)?));
            }
            let mut posted = ring.len();
            self.both().await?;
            while let Some(r) = ring.pop_front() {
                let done = r.await?;
                if posted < receives {
                    ring.push_back(self.node.receive(1, done.into_buf()));
                    posted += 1;
                }
            }
        } else {
            let remote = self.remote(0, size)?;
            let src = Arc::new(self.buf(size, 7)?);
            self.both().await?;
            let start = Instant::now();
            let mut window = VecDeque::with_capacity(depth);
            let mut reads = VecDeque::new();
            for _ in 0..depth.min(args.iters) {
                reads.push_back(self.buf(size, 0)?);
            }
            // Writes and sends go as lists of `post_list` (one doorbell,
            // selective signalling), as the scoped path's do; reads one by
            // one, as the scoped path's do.
            let list = if args.test == "read_bw" {
                1
            } else {
                args.post_list.clamp(1, depth)
            };
            let mut posted = 0;
            while posted < args.iters {
                let k = list.min(args.iters - posted);
                while window.iter().map(Pending::len).sum::<usize>() + k > depth {
                    finish(window.pop_front(), &mut reads).await?;
                }
                let items = (0..k).map(|_| (src.clone(), 0..size));
                // One at a time, as a program posting one would: an
                // operation, not a list of one.
                match args.test.as_str() {
                    "write_bw" if k == 1 => window.push_back(Pending::Src(self.node.write_range(
                        0,
                        src.clone(),
                        0..size,
                        remote,
                    ))),
                    "send_bw" if k == 1 => window.push_back(Pending::Src(self.node.send_range(
                        0,
                        src.clone(),
                        0..size,
                    ))),
                    "write_bw" => window.push_back(Pending::List(
                        self.node.write_list(0, items.map(|(s, r)| (s, r, remote))),
                    )),
                    "send_bw" => window.push_back(Pending::List(self.node.send_list(0, items))),
                    _ => {
                        let dst = reads.pop_front().ok_or("no read buffer")?;
                        window.push_back(Pending::Dst(self.node.read(0, dst, remote)));
                    }
                }
                posted += k;
            }
            while !window.is_empty() {
                finish(window.pop_front(), &mut reads).await?;
            }
            let end = Instant::now();
            if args.test != "send_bw" {
                self.node.send_range(0, self.buf(1, 0)?, 0..1).await?;
            }
            let bytes = (args.iters * size) as f64;
            let avg = bytes / (end - start).as_secs_f64() / crate::report::MB;
            measured = Some(Measured {
                bytes,
                start,
                end,
                peak: avg,
            });
        }
        self.both().await?;
        Ok(measured)
    }
}

enum Pending {
    List(ferrovia::asynchronous::OpList<Arc<ferrovia::RegisteredBuffer>>),
    Src(ferrovia::asynchronous::Op<Arc<ferrovia::RegisteredBuffer>>),
    Dst(ferrovia::asynchronous::Op<ferrovia::RegisteredBuffer>),
}

impl Pending {
    fn len(&self) -> usize {
        match self {
            Pending::List(l) => l.len(),
            Pending::Src(_) | Pending::Dst(_) => 1,
        }
    }
}

async fn finish(p: Option<Pending>, reads: &mut VecDeque<ferrovia::RegisteredBuffer>) -> Res<()> {
    match p {
        Some(Pending::List(list)) => {
            for r in list.await {
                r?;
            }
        }
        Some(Pending::Src(op)) => drop(op.await?),
        Some(Pending::Dst(op)) => reads.push_back(op.await?.into_buf()),
        None => {}
    }
    Ok(())
}

/// Waits for the peer's write of round `round` to flip the flag byte,
/// yielding to the runtime between looks (the reactor progresses UCX
/// meanwhile).
async fn arrived(flag: &Flag<'_>, round: usize) -> Res<()> {
    let t = Instant::now();
    let mut looks = 0u32;
    while !flag.landed(round) {
        looks = looks.wrapping_add(1);
        if looks.is_multiple_of(16) {
            tokio::task::yield_now().await;
            if t.elapsed() > WAIT {
                return Err(flag.never_arrived(round).into());
            }
        }
        std::hint::spin_loop();
    }
    Ok(())
}
