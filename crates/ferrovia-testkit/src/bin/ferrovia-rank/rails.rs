//! `ferrovia-rank rails`: every rank opens two rails (rail 1 on
//! `FERROVIA_RAIL1_DEVICE` when set, on verbs; a UCX worker of its own on
//! UCX), runs a `MultiChannel` over each, and exchanges sends and RDMA
//! writes with every rank on both, data checked. Then rank 0 flushes rail
//! 1's connection to rank 1 (a drain deadline); while it is broken every
//! other connection carries a checked round, and while ranks 0 and 1
//! bring it back with `Node::reconnect_with`, rank 2 writes into their
//! memory on both rails; then every connection carries a checked round
//! again. `rails --fail-rank R`: rank R names a device that does not
//! exist; every rank must fail at once (R with its own error, the others
//! naming R), then open the rail again and exchange. Ranks print what
//! happened (the test reads the lines).

use std::cell::RefCell;
use std::time::{Duration, Instant};

use ferrovia_channel::{
    ChannelConfig, Gather, MultiChannel, PeerReceiveWorkRequest, PeerSendWorkRequest,
    PeerWriteWorkRequest, ReceiveWorkRequest, Scatter, ScopeError, SendWorkRequest, TransportError,
    WriteWorkRequest,
};
use ferrovia_mr::{RegisterOptions, RegisteredBuffer, RemoteMemoryRegion, Shared};
use ferrovia_node::{Backend, Node, NodeError, RailError, RailSpec};

const WAIT: Duration = Duration::from_secs(30);
const SLOT: usize = 64;
/// The round of rank 2's writes while ranks 0 and 1 reconnect.
const DURING: usize = 99;

/// What the scenario does.
pub(crate) struct Plan {
    /// This rank opens its first rail on a device that does not exist.
    pub(crate) fail_rank: Option<usize>,
    /// Each open_rail's and reconnect's timeout.
    pub(crate) timeout: Duration,
}

fn bad(what: String) -> NodeError {
    NodeError::Transport(TransportError::Config(what))
}

fn pattern(rail: usize, from: usize, to: usize, round: usize) -> [u8; SLOT] {
    std::array::from_fn(|i| (rail * 101 + from * 31 + to * 7 + round * 13 + i) as u8)
}

/// A rail under a channel of its own, with the memory the rounds use.
struct OnRail {
    id: usize,
    link: u32,
    channel: MultiChannel,
    /// Slot `p`: what rank `p` wrote here.
    inbox: RegisteredBuffer<Shared>,
    /// Every rank's inbox on this rail.
    remotes: Vec<RemoteMemoryRegion>,
}

impl OnRail {
    fn open(node: &mut Node, id: usize, spec: RailSpec, t: Duration) -> Result<OnRail, NodeError> {
        let me = node.rank();
        let started = Instant::now();
        let rail = node.open_rail(id as u32, spec, t)?;
        println!(
            "rank {me}: rail {id} ({}) open in {} ms",
            rail.describe(),
            started.elapsed().as_millis()
        );
        let channel = MultiChannel::over(
            rail.transport().clone(),
            rail.registry().clone(),
            ChannelConfig::default(),
        );
        let opts = RegisterOptions::local().allow_remote_write();
        let inbox = rail.registry().alloc(node.world_size() * SLOT, opts)?;
        let remotes = node.all_gather_remote(inbox.registration().remote()?, WAIT)?;
        Ok(OnRail {
            id,
            link: rail.link(),
            channel,
            inbox,
            remotes,
        })
    }

    /// A round on this rail: a send and a write from every rank to every
    /// rank it `talks` with (itself included), each checked where it
    /// lands.
    fn round(
        &mut self,
        node: &mut Node,
        round: usize,
        talks: impl Fn(usize, usize) -> bool,
    ) -> Result<(), NodeError> {
        let (me, n) = (node.rank(), node.world_size());
        let all: Vec<usize> = (0..n).collect();
        let peers: Vec<usize> = (0..n).filter(|&p| talks(me, p)).collect();
        let reg = self.channel.registry().clone();
        let mut outbox = reg.alloc(n * SLOT, RegisterOptions::local())?;
        let mut recv = reg.alloc(n * SLOT, RegisterOptions::local())?;
        for p in 0..n {
            outbox[p * SLOT..(p + 1) * SLOT].copy_from_slice(&pattern(self.id, me, p, round));
        }
        let (id, remotes) = (self.id, &self.remotes);
        self.channel
            .scope(|s| {
                let (bytes, rreg) = recv.split_mut();
                let mut chunks: Vec<_> = bytes.chunks_mut(SLOT).map(Some).collect();
                let mut recvs = Vec::new();
                for &p in &peers {
                    let chunk = chunks[p].take().unwrap_or_default();
                    let wr = ReceiveWorkRequest::new(Scatter::new(rreg, chunk)?);
                    recvs.push((p, s.post_receive(PeerReceiveWorkRequest::new(p, wr))?));
                }
                node.barrier(&all, WAIT)?; // every receive is posted
                let gathers: Vec<[Gather<'_>; 1]> = (0..n)
                    .map(|p| Ok([Gather::range(&outbox, p * SLOT..(p + 1) * SLOT)?]))
                    .collect::<Result<_, NodeError>>()?;
                let mut posted = Vec::new();
                for &p in &peers {
                    let send = SendWorkRequest::new(&gathers[p])?;
                    posted.push(s.post_send(PeerSendWorkRequest::new(p, send))?);
                    let at = remotes[p].sub_region((me * SLOT) as u64, SLOT as u64)?;
                    let write = WriteWorkRequest::new(&gathers[p], at)?;
                    posted.push(s.post_write(PeerWriteWorkRequest::new(p, write))?);
                }
                for h in posted {
                    h.wait(WAIT)?;
                }
                for (p, h) in recvs {
                    let got = h.wait(WAIT)?.into_received().unwrap_or_default();
                    if got != pattern(id, p, me, round) {
                        return Err(bad(format!(
                            "rail {id}, round {round}: the send from rank {p} is corrupted"
                        )));
                    }
                }
                Ok::<_, NodeError>(())
            })
            .map_err(NodeError::from)?;
        node.barrier(&all, WAIT)?; // every write has landed
        self.check_slots(me, round, peers.iter().copied())?;
        node.barrier(&all, WAIT)?; // nobody writes the next round yet
        Ok(())
    }

    /// The slots `from` wrote here hold their pattern of `round`.
    fn check_slots(
        &self,
        me: usize,
        round: usize,
        from: impl Iterator<Item = usize>,
    ) -> Result<(), NodeError> {
        let landed = self.inbox.to_vec();
        for p in from {
            if landed[p * SLOT..(p + 1) * SLOT] != pattern(self.id, p, me, round) {
                return Err(bad(format!(
                    "rail {}, round {round}: the write from rank {p} is corrupted",
                    self.id
                )));
            }
        }
        Ok(())
    }

    /// One write of `round`'s pattern into `to`'s slot for this rank.
    fn write(&mut self, me: usize, to: usize, round: usize) -> Result<(), NodeError> {
        let src = self.channel.registry().register_buffer(
            pattern(self.id, me, to, round).to_vec(),
            RegisterOptions::local(),
        )?;
        let at = self.remotes[to].sub_region((me * SLOT) as u64, SLOT as u64)?;
        self.channel
            .scope(|s| {
                let g = [Gather::of(&src)?];
                s.post_write(PeerWriteWorkRequest::new(
                    to,
                    WriteWorkRequest::new(&g, at)?,
                ))?
                .wait(WAIT)
                .map(drop)
                .map_err(NodeError::from)
            })
            .map_err(NodeError::from)
    }
}

/// Rail 1's spec: a device of its own on verbs when the environment names
/// one, a worker of its own on UCX.
fn rail1_spec(node: &Node) -> RailSpec {
    match (node.backend(), std::env::var("FERROVIA_RAIL1_DEVICE")) {
        (Backend::Verbs, Ok(device)) if !device.is_empty() => RailSpec::Device(device),
        (Backend::Ucx, _) => RailSpec::Worker,
        _ => RailSpec::Same,
    }
}

pub(crate) fn run(node: &mut Node, plan: Plan) -> Result<(), NodeError> {
    let (me, n) = (node.rank(), node.world_size());
    if n < 3 {
        return Err(bad("rails needs at least 3 ranks".into()));
    }
    let all: Vec<usize> = (0..n).collect();
    if let Some(failing) = plan.fail_rank {
        return fail_fast(node, failing, plan.timeout);
    }
    let spec = rail1_spec(node);
    let mut rails = vec![
        OnRail::open(node, 0, RailSpec::Same, plan.timeout)?,
        OnRail::open(node, 1, spec, plan.timeout)?,
    ];
    let everyone = |_: usize, _: usize| true;
    for rail in &mut rails {
        rail.round(node, 0, everyone)?;
    }
    println!("rank {me}: round 0 on both rails verified");

    // Rail 1's connection between ranks 0 and 1 breaks.
    if me == 0 {
        flush(&mut rails[1].channel, 1)?;
    }
    node.barrier(&all, WAIT)?;
    let not_01 = |a: usize, b: usize| !(a.min(b) == 0 && a.max(b) == 1);
    rails[0].round(node, 1, everyone)?;
    rails[1].round(node, 1, not_01)?;
    println!("rank {me}: round 1 verified on rail 0 and on rail 1 but between ranks 0 and 1");

    // Ranks 0 and 1 reconnect it; rank 2 writes into their memory on both
    // rails meanwhile.
    if me <= 1 {
        let peer = 1 - me;
        let link = rails[1].link;
        let ch = RefCell::new(&mut rails[1].channel);
        let started = Instant::now();
        node.reconnect_with(
            link,
            peer,
            plan.timeout,
            || Ok(ch.borrow_mut().renew(peer)?),
            |theirs| Ok(ch.borrow_mut().connect_renewed(peer, &theirs)?),
        )?;
        println!(
            "rank {me}: reconnected rail 1 (link {link}) with rank {peer} in {} ms",
            started.elapsed().as_millis()
        );
    } else if me == 2 {
        let started = Instant::now();
        let mut writes = 0;
        while writes == 0 || started.elapsed() < Duration::from_millis(300) {
            for rail in &mut rails {
                for to in [0, 1] {
                    rail.write(me, to, DURING)?;
                    writes += 1;
                }
            }
        }
        println!("rank 2: {writes} writes to ranks 0 and 1 on both rails while they reconnected");
    }
    node.barrier(&all, WAIT)?;
    if me <= 1 {
        for rail in &rails {
            rail.check_slots(me, DURING, std::iter::once(2))?;
        }
        println!("rank {me}: rank 2's writes during the reconnect landed on both rails");
    }
    node.barrier(&all, WAIT)?;
    for rail in &mut rails {
        rail.round(node, 2, everyone)?;
    }
    println!("rank {me}: round 2 on both rails verified");
    if me <= 1 {
        let peer = 1 - me;
        let (rail1, own) = (
            node.link_generation(rails[1].link, peer),
            node.connection_generation(peer),
        );
        let rail0 = node.link_generation(rails[0].link, peer);
        println!(
            "rank {me}: generations with rank {peer}: node {own:?}, rail 0 {rail0:?}, rail 1 {rail1:?}"
        );
        if (own, rail0, rail1) != (Some(0), Some(0), Some(1)) {
            return Err(bad("a reconnect counted on the wrong link".into()));
        }
    }
    node.barrier(&all, WAIT)?;
    println!("rank {me}: rails done");
    Ok(())
}

/// Leaves `channel`'s connection to `peer` flushed: a receive it never
/// fills, past a short drain deadline; a send then fails as broken.
fn flush(channel: &mut MultiChannel, peer: usize) -> Result<(), NodeError> {
    let mut inbox = channel.registry().alloc(SLOT, RegisterOptions::local())?;
    let r = channel.scope(|s| {
        s.set_drain_deadline(Duration::from_millis(200));
        drop(s.post_receive(PeerReceiveWorkRequest::new(
            peer,
            ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
        ))?);
        Ok::<_, NodeError>(())
    });
    match r {
        Err(ScopeError::Drain(d)) => {
            println!("rank 0: flushed rail 1's connection to rank {peer}: {d}")
        }
        other => return Err(bad(format!("expected a flush, got {other:?}"))),
    }
    let msg = channel
        .registry()
        .register_buffer(vec![1u8; 8], RegisterOptions::local())?;
    let sent = channel.scope(|s| {
        let g = [Gather::of(&msg)?];
        s.post_send(PeerSendWorkRequest::new(peer, SendWorkRequest::new(&g)?))
            .map(drop)
            .map_err(NodeError::from)
    });
    println!("rank 0: a send to rank {peer} on the flushed rail: {sent:?}");
    Ok(())
}

/// Rank `failing` opens rail 0 on a device that does not exist: each rank
/// reports how its open_rail ended and how long it took, then every rank
/// opens rail 0 again and exchanges on it.
fn fail_fast(node: &mut Node, failing: usize, timeout: Duration) -> Result<(), NodeError> {
    let me = node.rank();
    let spec = match me == failing {
        true => RailSpec::Device("no-such-device".into()),
        false => RailSpec::Same,
    };
    let started = Instant::now();
    let e = match node.open_rail(0, spec, timeout) {
        Ok(_) => return Err(bad("open_rail with a missing device succeeded".into())),
        Err(e) => e,
    };
    println!(
        "rank {me}: open_rail failed in {} ms: {e}",
        started.elapsed().as_millis()
    );
    let expected = match &e {
        NodeError::Rail(RailError::PeerFailed { rank, .. }) => *rank == failing && me != failing,
        NodeError::Rail(
            RailError::NoDevices { device, .. } | RailError::NoSuchDevice { device, .. },
        ) => me == failing && device == "no-such-device",
        _ => false,
    };
    if !expected {
        return Err(bad(format!("rank {me}: unexpected error: {e}")));
    }
    let mut rail = OnRail::open(node, 0, RailSpec::Same, timeout)?;
    rail.round(node, 0, |_, _| true)?;
    println!("rank {me}: rail 0 opened again and verified");
    Ok(())
}
