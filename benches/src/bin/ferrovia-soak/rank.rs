//! One rank of the soak: rank 0 draws each round and sends its header to
//! every rank (a checked message), every rank plays it, and all meet in a
//! barrier before the next. Every message and write carries a pattern of
//! (sender, receiver, round) and is checked; any error or timeout ends the
//! rank with a non-zero status, and the counts are printed at the end.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrovia::prelude::*;
use ferrovia::{
    AsyncNode, ChannelBuilder, Gather, Listener, MrRegistry, Node, NodeBuilder, NodeError,
    PeerReceiveWorkRequest, PeerSendWorkRequest, PeerWriteWorkRequest, ReceiveWorkRequest,
    RegisterOptions, RemoteMemoryRegion, Scatter, ScopeError, SendWorkRequest, SharedBuffer,
    TransportError, WriteWorkRequest,
};

use crate::rounds::{HEADER, Rng, Round};

/// Bytes of one message or write.
pub(crate) const SLOT: usize = 64;
/// How long any wait may take before it counts as a hang.
const WAIT: Duration = Duration::from_secs(30);

/// What a rank counts.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    rounds: u64,
    messages: u64,
    writes: u64,
    wrong: u64,
    flushes: u64,
    stale_sends_failed: u64,
    reconnects: u64,
    barriers: u64,
    clients: u64,
    async_ops: u64,
    async_dropped: u64,
}

fn config(why: String) -> NodeError {
    NodeError::Transport(TransportError::Config(why))
}

/// The bytes `from` sends `to` in `round`, tagged `what`.
pub(crate) fn pattern(from: usize, to: usize, round: u32, what: u8) -> [u8; SLOT] {
    let mut p = [0u8; SLOT];
    p[0] = what;
    p[1..3].copy_from_slice(&(from as u16).to_le_bytes());
    p[3..5].copy_from_slice(&(to as u16).to_le_bytes());
    p[5..9].copy_from_slice(&round.to_le_bytes());
    for (i, b) in p.iter_mut().enumerate().skip(9) {
        *b = (from * 31 + to * 7 + round as usize * 13 + i) as u8;
    }
    p
}

struct Rank {
    me: usize,
    n: usize,
    all: Vec<usize>,
    inbox: SharedBuffer,
    remotes: Vec<RemoteMemoryRegion>,
    listener: Option<Listener>,
    counts: Counts,
}

pub(crate) fn run(seconds: u64, seed: u64) -> Result<(), NodeError> {
    let node = NodeBuilder::from_env_or_launch(2)?
        .channel(ChannelBuilder::default())
        .build()?;
    let (me, n) = (node.rank(), node.world_size());
    let inbox = node
        .registry()
        .alloc(n * SLOT, RegisterOptions::local().allow_remote_write())?;
    let mut node = node;
    let remotes = node.all_gather_remote(inbox.registration().remote()?, WAIT)?;
    let listener = if me == 0 {
        let ip = ferrovia::node::local_ip(node.backend())
            .ok_or_else(|| config("no address to listen on".into()))?;
        Some(
            Listener::builder(SocketAddr::new(ip, 0))
                .backend(node.backend())
                .max_pending(8)
                .handshake_timeout(Duration::from_millis(500))
                .bind()
                .map_err(|e| config(format!("listener: {e}")))?,
        )
    } else {
        None
    };
    let mut ports = vec![node.control_addr()];
    if let Some(l) = &listener {
        ports.push(l.local_addr());
    }
    let ports: Vec<String> = ports.iter().map(|p| p.to_string()).collect();
    println!(
        "soak-ports rank={me} pid={} ports={}",
        std::process::id(),
        ports.join(",")
    );
    let mut r = Rank {
        all: (0..n).collect(),
        me,
        n,
        inbox,
        remotes,
        listener,
        counts: Counts::default(),
    };
    node.barrier(&r.all, WAIT)?;
    println!("soak: rank {me} of {n} started over {}", node.describe());
    let started = Instant::now();
    let mut rng = Rng::new(seed);
    let mut round = 0u32;
    loop {
        let drawn = if me == 0 {
            if started.elapsed() >= Duration::from_secs(seconds) {
                Round::Stop
            } else {
                Round::draw(&mut rng, n)
            }
        } else {
            Round::Stop // replaced by rank 0's header
        };
        let kind = r.header(&mut node, round, drawn)?;
        if kind == Round::Stop {
            break;
        }
        node = match kind {
            Round::Async { ops } => r.asynchronous(node, round, ops)?,
            other => {
                r.play(&mut node, round, other)?;
                node
            }
        };
        node.barrier(&r.all, WAIT)?;
        r.counts.barriers += 1;
        r.counts.rounds += 1;
        round += 1;
    }
    let c = &r.counts;
    println!(
        "soak-report rank={me} rounds={} messages={} writes={} wrong={} lost=0 hangs=0 flushes={} \
         stale_sends_failed={} stale_dropped={} reconnects={} barriers={} clients={} async_ops={} \
         async_dropped={} backend={:?}",
        c.rounds,
        c.messages,
        c.writes,
        c.wrong,
        c.flushes,
        c.stale_sends_failed,
        node.stale_dropped(),
        c.reconnects,
        c.barriers,
        c.clients,
        c.async_ops,
        c.async_dropped,
        node.describe(),
    );
    if c.wrong > 0 {
        return Err(config(format!("{} messages or writes were wrong", c.wrong)));
    }
    Ok(())
}

impl Rank {
    /// Rank 0 sends `drawn`'s header to every rank; the others receive
    /// it. The round everyone plays.
    fn header(&mut self, node: &mut Node, round: u32, drawn: Round) -> Result<Round, NodeError> {
        let (me, n) = (self.me, self.n);
        if n == 1 {
            return Ok(drawn);
        }
        if me == 0 {
            let h = node
                .registry()
                .register_buffer(drawn.encode(round).to_vec(), RegisterOptions::local())?;
            node.scope(|s| {
                let g = [Gather::of(&h)?];
                let sends = s.post_multicast_send(1..n, SendWorkRequest::new(&g)?)?;
                for h in sends {
                    h.wait(WAIT)?;
                }
                Ok::<_, NodeError>(())
            })?;
            return Ok(drawn);
        }
        let mut buf = node.registry().alloc(HEADER, RegisterOptions::local())?;
        let got = node.scope(|s| {
            let d = s
                .post_receive(PeerReceiveWorkRequest::new(
                    0,
                    ReceiveWorkRequest::new(Scatter::of(&mut buf)?),
                ))?
                .wait(WAIT)?;
            Ok::<_, NodeError>(d.into_received().unwrap_or_default().to_vec())
        })?;
        match Round::decode(&got) {
            Some((r, kind)) if r == round => Ok(kind),
            other => {
                self.counts.wrong += 1;
                Err(config(format!(
                    "round {round}: a bad header from rank 0: {other:?}"
                )))
            }
        }
    }

    fn play(&mut self, node: &mut Node, round: u32, kind: Round) -> Result<(), NodeError> {
        match kind {
            Round::Exchange => self.exchange(node, round),
            Round::Flush { a, b } => self.flush(node, round, a, b),
            Round::Subset { mask, count } => self.subset(node, mask, count),
            Round::ByAddress => self.by_address(node, round),
            // Played by `asynchronous`, which takes the node over.
            Round::Async { .. } | Round::Stop => Ok(()),
        }
    }

    /// All-to-all: a message to and a write into every other rank.
    fn exchange(&mut self, node: &mut Node, round: u32) -> Result<(), NodeError> {
        let (me, n) = (self.me, self.n);
        let others: Vec<usize> = (0..n).filter(|&p| p != me).collect();
        let registry = node.registry().clone();
        let mut recv = registry.alloc(n * SLOT, RegisterOptions::local())?;
        let mut out = registry.alloc(n * SLOT, RegisterOptions::local())?;
        for p in 0..n {
            out[p * SLOT..(p + 1) * SLOT].copy_from_slice(&pattern(me, p, round, b'M'));
        }
        let (remotes, all) = (&self.remotes, &self.all);
        let got = node.scope(|s| {
            let (rbytes, rreg) = recv.split_mut();
            let mut chunks: Vec<_> = rbytes.chunks_mut(SLOT).map(Some).collect();
            let recvs = s.post_gather_receive(
                others
                    .iter()
                    .map(|&p| {
                        Ok(PeerReceiveWorkRequest::new(
                            p,
                            ReceiveWorkRequest::new(Scatter::new(
                                rreg,
                                chunks[p].take().unwrap_or_default(),
                            )?),
                        ))
                    })
                    .collect::<Result<Vec<_>, NodeError>>()?,
            )?;
            s.barrier(all, WAIT)?;
            let gathers: Vec<[Gather<'_>; 1]> = (0..n)
                .map(|p| Ok([Gather::range(&out, p * SLOT..(p + 1) * SLOT)?]))
                .collect::<Result<_, NodeError>>()?;
            let sends = s.post_scatter_send(
                others
                    .iter()
                    .map(|&p| {
                        Ok(PeerSendWorkRequest::new(
                            p,
                            SendWorkRequest::new(&gathers[p])?,
                        ))
                    })
                    .collect::<Result<Vec<_>, NodeError>>()?,
            )?;
            let writes = s.post_scatter_write(
                others
                    .iter()
                    .map(|&p| {
                        Ok(PeerWriteWorkRequest::new(
                            p,
                            WriteWorkRequest::new(
                                &gathers[p],
                                remotes[p].sub_region((me * SLOT) as u64, SLOT as u64)?,
                            )?,
                        ))
                    })
                    .collect::<Result<Vec<_>, NodeError>>()?,
            )?;
            for h in sends.into_iter().chain(writes) {
                h.wait(WAIT)?;
            }
            let mut got = Vec::with_capacity(others.len());
            for (h, &p) in recvs.into_iter().zip(&others) {
                got.push((
                    p,
                    h.wait(WAIT)?.into_received().unwrap_or_default().to_vec(),
                ));
            }
            s.barrier(all, WAIT)?; // every write has landed
            Ok::<_, NodeError>(got)
        })?;
        let landed = self.inbox.to_vec();
        for (p, bytes) in got {
            self.counts.messages += 1;
            if bytes != pattern(p, me, round, b'M') {
                self.counts.wrong += 1;
                eprintln!("round {round}: rank {me}: the message from rank {p} is wrong");
            }
            self.counts.writes += 1;
            if landed[p * SLOT..(p + 1) * SLOT] != pattern(p, me, round, b'M') {
                self.counts.wrong += 1;
                eprintln!("round {round}: rank {me}: the write from rank {p} is wrong");
            }
        }
        Ok(())
    }

    /// Rank `a` breaks its connection to `b`, and `b` sends on the old
    /// one; both reconnect and swap a checked message. Even rounds: `a`
    /// flushes at a drain deadline, then `b` sends. Odd rounds: `b` sends
    /// a message too long for `a`'s 1-byte receive (a length error breaks
    /// the connection on both backends) and another right behind it, which
    /// must never reach `a` afterwards.
    fn flush(&mut self, node: &mut Node, round: u32, a: usize, b: usize) -> Result<(), NodeError> {
        let me = self.me;
        if me != a && me != b {
            return Ok(());
        }
        let peer = if me == a { b } else { a };
        let too_long = round % 2 == 1;
        let registry = node.registry().clone();
        if me == a {
            let mut short =
                registry.alloc(if too_long { 1 } else { SLOT }, RegisterOptions::local())?;
            let pair = [a.min(b), a.max(b)];
            let r = node.scope(|s| {
                s.set_drain_deadline(Duration::from_millis(100));
                let h = s.post_receive(PeerReceiveWorkRequest::new(
                    peer,
                    ReceiveWorkRequest::new(Scatter::of(&mut short)?),
                ))?;
                if too_long {
                    s.barrier(&pair, WAIT)?; // posted before `b` sends
                    return Ok(h.wait(WAIT).map(drop));
                }
                drop(h);
                Ok::<_, NodeError>(Ok(()))
            });
            match (too_long, r) {
                (false, Err(ScopeError::Drain(_))) => self.counts.flushes += 1,
                (true, Ok(Err(TransportError::Completion(c))))
                    if c.status.class() == ferrovia::WcClass::LocalLength
                        || c.status.class() == ferrovia::WcClass::LocalOperation =>
                {
                    self.counts.flushes += 1
                }
                (_, other) => {
                    return Err(config(format!(
                        "round {round}: expected rank {peer}'s connection to break: {other:?}"
                    )));
                }
            }
        } else {
            let pair = [a.min(b), a.max(b)];
            if too_long {
                node.barrier(&pair, WAIT)?;
            } else {
                std::thread::sleep(Duration::from_millis(200));
            }
            let stale = registry.register_buffer(
                pattern(me, peer, round, b'S').to_vec(),
                RegisterOptions::local(),
            )?;
            for _ in 0..if too_long { 2 } else { 1 } {
                // Bounded: over UCX it fails at once; on soft-RoCE a send
                // to a QP in error retries for longer than `a`'s reconnect
                // waits, so it is given up on after a second and flushed.
                // Either way it must never reach the new connection.
                let sent = node.scope(|s| {
                    s.set_drain_deadline(Duration::from_millis(200));
                    let g = [Gather::of(&stale)?];
                    s.post_send(PeerSendWorkRequest::new(peer, SendWorkRequest::new(&g)?))?
                        .wait(Duration::from_secs(1))
                        .map(drop)
                        .map_err(NodeError::from)
                });
                if sent.is_err() {
                    self.counts.stale_sends_failed += 1;
                }
            }
        }
        node.reconnect(peer, WAIT)?;
        self.counts.reconnects += 1;
        self.swap(node, round, peer)
    }

    /// A checked message each way with `peer`.
    fn swap(&mut self, node: &mut Node, round: u32, peer: usize) -> Result<(), NodeError> {
        let me = self.me;
        let registry = node.registry().clone();
        let msg = registry.register_buffer(
            pattern(me, peer, round, b'F').to_vec(),
            RegisterOptions::local(),
        )?;
        let mut inbox = registry.alloc(SLOT, RegisterOptions::local())?;
        let pair = [me.min(peer), me.max(peer)];
        let got = node.scope(|s| {
            let r = s.post_receive(PeerReceiveWorkRequest::new(
                peer,
                ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
            ))?;
            s.barrier(&pair, WAIT)?;
            let g = [Gather::of(&msg)?];
            s.post_send(PeerSendWorkRequest::new(peer, SendWorkRequest::new(&g)?))?
                .wait(WAIT)?;
            Ok::<_, NodeError>(r.wait(WAIT)?.into_received().unwrap_or_default().to_vec())
        })?;
        self.counts.barriers += 1;
        self.counts.messages += 1;
        if got != pattern(peer, me, round, b'F') {
            self.counts.wrong += 1;
            eprintln!(
                "round {round}: rank {me}: after the reconnect, rank {peer}'s message is wrong (a stale one?)"
            );
        }
        Ok(())
    }

    fn subset(&mut self, node: &mut Node, mask: u64, count: u8) -> Result<(), NodeError> {
        let members: Vec<usize> = (0..self.n).filter(|&p| mask >> p & 1 == 1).collect();
        if !members.contains(&self.me) {
            return Ok(());
        }
        for _ in 0..count {
            node.barrier(&members, WAIT)?;
            self.counts.barriers += 1;
        }
        Ok(())
    }

    /// Rank 1 connects to rank 0's listener; a checked message each way.
    fn by_address(&mut self, node: &mut Node, round: u32) -> Result<(), NodeError> {
        let me = self.me;
        if me > 1 {
            return Ok(());
        }
        let addr = self.listener_addr(node, round)?;
        let mut ch = if me == 0 {
            let listener = self
                .listener
                .as_ref()
                .ok_or_else(|| config("no listener".into()))?;
            let incoming = listener
                .accept(WAIT)
                .map_err(|e| config(format!("round {round}: accept: {e}")))?;
            incoming
                .accept(b"soak-server", WAIT)
                .map_err(|e| config(format!("round {round}: accept: {e}")))?
        } else {
            ferrovia::Connector::new()
                .backend(node.backend())
                .connect(addr, b"soak-client", WAIT)
                .map_err(|e| config(format!("round {round}: connect to {addr}: {e}")))?
        };
        let peer = 1 - me;
        let msg = ch.registry().register_buffer(
            pattern(me, peer, round, b'L').to_vec(),
            RegisterOptions::local(),
        )?;
        let mut inbox = ch.registry().alloc(SLOT, RegisterOptions::local())?;
        let got = ch
            .scope(|s| {
                let r = s.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
                let g = [Gather::of(&msg)?];
                s.post_send(SendWorkRequest::new(&g)?)?.wait(WAIT)?;
                Ok::<_, TransportError>(r.wait(WAIT)?.into_received().unwrap_or_default().to_vec())
            })
            .map_err(|e| config(format!("round {round}: by address: {e}")))?;
        self.counts.messages += 1;
        self.counts.clients += 1;
        if got != pattern(peer, me, round, b'L') {
            self.counts.wrong += 1;
            eprintln!("round {round}: rank {me}: the message by address is wrong");
        }
        // Both done before either drops its side.
        node.barrier(&[0, 1], WAIT)?;
        drop(ch);
        Ok(())
    }

    /// Rank 0's listener address, sent to rank 1 in a message.
    fn listener_addr(&mut self, node: &mut Node, round: u32) -> Result<SocketAddr, NodeError> {
        let registry: MrRegistry = node.registry().clone();
        if self.me == 0 {
            let addr = self
                .listener
                .as_ref()
                .map(|l| l.local_addr())
                .ok_or_else(|| config("no listener".into()))?;
            let mut text = addr.to_string().into_bytes();
            text.resize(SLOT, b' ');
            let m = registry.register_buffer(text, RegisterOptions::local())?;
            node.scope(|s| {
                let g = [Gather::of(&m)?];
                s.post_send(PeerSendWorkRequest::new(1, SendWorkRequest::new(&g)?))?
                    .wait(WAIT)?;
                Ok::<_, NodeError>(())
            })?;
            return Ok(addr);
        }
        let mut buf = registry.alloc(SLOT, RegisterOptions::local())?;
        let got = node.scope(|s| {
            let d = s
                .post_receive(PeerReceiveWorkRequest::new(
                    0,
                    ReceiveWorkRequest::new(Scatter::of(&mut buf)?),
                ))?
                .wait(WAIT)?;
            Ok::<_, NodeError>(d.into_received().unwrap_or_default().to_vec())
        })?;
        String::from_utf8_lossy(&got)
            .trim()
            .parse()
            .map_err(|e| config(format!("round {round}: rank 0's listener address: {e}")))
    }

    /// Async operations around the ring: `ops` messages to the right
    /// neighbour, every other send future dropped as soon as it is made
    /// (posted, its buffer kept by the engine), every message from the left
    /// one awaited and checked; then the engine is shut down and the node
    /// comes back, with every dropped future's buffer returned.
    fn asynchronous(&mut self, node: Node, round: u32, ops: u8) -> Result<Node, NodeError> {
        let (me, n) = (self.me, self.n);
        if n < 2 {
            return Ok(node);
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| config(format!("a runtime: {e}")))?;
        let (right, left) = ((me + 1) % n, (me + n - 1) % n);
        let all = self.all.clone();
        let counts = &mut self.counts;
        runtime.block_on(async move {
            let an = AsyncNode::new(node).map_err(|e| config(format!("async: {e}")))?;
            let registry = an.registry().clone();
            let mut receives = Vec::with_capacity(usize::from(ops));
            for _ in 0..ops {
                receives.push(an.receive(left, registry.alloc(SLOT, RegisterOptions::local())?));
            }
            // Every rank's receives are posted before anyone sends.
            an.barrier(&all, WAIT)
                .await
                .map_err(|e| config(format!("round {round}: async barrier: {e}")))?;
            let mut sends = Vec::new();
            let mut dropped = 0;
            for i in 0..ops {
                let msg = registry.register_buffer(
                    pattern(me, right, round, i).to_vec(),
                    RegisterOptions::local(),
                )?;
                let op = an.send(right, msg);
                if i % 2 == 1 {
                    drop(op);
                    dropped += 1;
                } else {
                    sends.push(op);
                }
            }
            for op in sends {
                tokio::time::timeout(WAIT, op)
                    .await
                    .map_err(|_| config(format!("round {round}: an async send hung")))?
                    .map_err(|e| config(format!("round {round}: async send: {}", e.error)))?;
            }
            for (i, op) in receives.into_iter().enumerate() {
                let got = tokio::time::timeout(WAIT, op)
                    .await
                    .map_err(|_| config(format!("round {round}: an async receive hung")))?
                    .map_err(|e| config(format!("round {round}: async receive: {}", e.error)))?;
                counts.messages += 1;
                if got.received() != pattern(left, me, round, i as u8) {
                    counts.wrong += 1;
                    eprintln!("round {round}: rank {me}: async message {i} from {left} is wrong");
                }
            }
            counts.async_ops += 2 * u64::from(ops);
            counts.async_dropped += dropped;
            // The dropped sends completed too: their buffers come back.
            let start = Instant::now();
            let mut returned = 0;
            while returned < dropped && start.elapsed() < WAIT {
                returned += an.take_returned().len() as u64;
                if returned < dropped {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            if returned != dropped {
                counts.wrong += 1;
                eprintln!(
                    "round {round}: rank {me}: {returned} of {dropped} dropped buffers came back"
                );
            }
            an.shutdown()
                .await
                .map_err(|e| config(format!("round {round}: async shutdown: {e}")))?;
            an.into_inner()
                .map_err(|_| config(format!("round {round}: the node did not come back")))
        })
    }
}
