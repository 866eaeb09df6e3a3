//! `ferrovia-rank member` and `store-lost`: members of a store-backed job
//! (`FERROVIA_STORE`), for the membership tests and the replacement
//! benchmark. Every line a test reads ends in a wall-clock stamp where it
//! times something (`at US`, microseconds since the epoch).
//!
//! `member`: round 0 (the node's exchange, every operation checked); the
//! victim sends messages nobody receives and waits to be killed; each
//! survivor waits for its departure (`Left`), for a new member of its
//! rank (`Joined`), admits it, and runs round 1 with every rank; a
//! replacement (`--replacement`) is connected by its build and runs round
//! 1 too. A stale message of the victim's landing in round 1 would fail
//! its check.
//!
//! `store-lost`: two members; the test kills the store after round 0 and
//! restarts it once both say they wait for it. Meanwhile the data path
//! runs and a membership call fails, typed, within its bound; once back,
//! each publishes a memory descriptor by name and writes through the
//! other's, fetched by name.

use std::time::{Duration, Instant};

use ferrovia_channel::{
    Gather, PeerSendWorkRequest, PeerWriteWorkRequest, SendWorkRequest, TransportError,
    WriteWorkRequest,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_node::{Backend, MemberEvent, Node, NodeError, NodeScope};

use crate::{SLOT, exchange, wall_us};

/// What this process is in the `member` scenario.
pub(crate) struct Plan {
    pub(crate) victim: Option<usize>,
    pub(crate) replacement: bool,
    pub(crate) timeout: Duration,
}

fn config(what: String) -> NodeError {
    NodeError::Transport(TransportError::Config(what))
}

/// The next event satisfying `want`, printing every event seen.
fn wait_for(
    node: &mut Node,
    timeout: Duration,
    what: &str,
    want: impl Fn(&MemberEvent) -> bool,
) -> Result<MemberEvent, NodeError> {
    let me = node.rank();
    let deadline = ferrovia_types::deadline_after(timeout);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(config(format!("no {what} event within {timeout:?}")));
        }
        if let Some(ev) = node.next_member_event(left)? {
            println!("rank {me}: event {ev:?} at {}", wall_us());
            if want(&ev) {
                return Ok(ev);
            }
        }
    }
}

pub(crate) fn run(node: &mut Node, plan: Plan) -> Result<(), NodeError> {
    let (me, n) = (node.rank(), node.world_size());
    let all: Vec<usize> = (0..n).collect();
    if plan.replacement {
        println!(
            "rank {me}: replacement connected (incarnation {:?}) at {}",
            node.incarnation(),
            wall_us()
        );
        exchange(node, 2)?;
        node.barrier(&all, plan.timeout)?;
        println!("rank {me}: barrier with every rank passed at {}", wall_us());
        return Ok(());
    }
    exchange(node, 1)?;
    if Some(me) == plan.victim {
        send_stale(node)?;
        println!("rank {me}: sent stale messages at {}", wall_us());
        // Killed by the test; leave on our own only long after.
        std::thread::sleep(plan.timeout * 4);
        return Err(config("the victim was never killed".into()));
    }
    println!("rank {me}: ready at {}", wall_us());
    let Some(victim) = plan.victim else {
        return Ok(());
    };
    wait_for(
        node,
        plan.timeout,
        "Left",
        |e| matches!(e, MemberEvent::Left { rank, .. } if *rank == victim),
    )?;
    // Its connection is flushed already: a send fails at once, naming it.
    let msg = node
        .registry()
        .register_buffer(vec![0u8; SLOT], RegisterOptions::local())?;
    let started = Instant::now();
    let sent = node.scope(|s| {
        let g = [Gather::of(&msg)?];
        s.post_send(PeerSendWorkRequest::new(victim, SendWorkRequest::new(&g)?))
            .map(|_| ())
    });
    println!(
        "rank {me}: a send to the departed rank: {} in {} ms",
        match sent {
            Ok(()) => "Ok".to_owned(),
            Err(e) => format!("Err({e})"),
        },
        started.elapsed().as_millis()
    );
    wait_for(
        node,
        plan.timeout,
        "Joined",
        |e| matches!(e, MemberEvent::Joined { rank, .. } if *rank == victim),
    )?;
    node.admit(victim, plan.timeout)?;
    println!("rank {me}: admitted rank {victim} at {}", wall_us());
    exchange(node, 2)?;
    node.barrier(&all, plan.timeout)?;
    println!("rank {me}: barrier with every rank passed at {}", wall_us());
    println!(
        "rank {me}: stale messages dropped: {}",
        node.stale_dropped()
    );
    Ok(())
}

/// Messages to every other rank that nobody receives: over UCX they wait
/// in the receivers' queues (on verbs a new queue pair cannot see them,
/// and a send without a receive would only wait for one).
fn send_stale(node: &mut Node) -> Result<(), NodeError> {
    if node.backend() != Backend::Ucx {
        return Ok(());
    }
    let me = node.rank();
    let others: Vec<usize> = (0..node.world_size()).filter(|&p| p != me).collect();
    let stale = node
        .registry()
        .register_buffer(vec![b'S'; SLOT], RegisterOptions::local())?;
    node.scope(|s| {
        let g = [Gather::of(&stale)?];
        for _ in 0..4 {
            for &p in &others {
                s.post_send(PeerSendWorkRequest::new(p, SendWorkRequest::new(&g)?))?
                    .wait(Duration::from_secs(10))?;
            }
        }
        Ok::<_, NodeError>(())
    })?;
    Ok(())
}

/// The `store-lost` scenario (two members).
pub(crate) fn store_lost(node: &mut Node, timeout: Duration) -> Result<(), NodeError> {
    let (me, n) = (node.rank(), node.world_size());
    let all: Vec<usize> = (0..n).collect();
    let other = (me + 1) % n;
    exchange(node, 1)?;
    println!("rank {me}: ready at {}", wall_us());
    wait_for(node, timeout, "StoreLost", |e| {
        matches!(e, MemberEvent::StoreLost { .. })
    })?;
    exchange(node, 2)?;
    println!("rank {me}: the data path runs without the store");
    let started = Instant::now();
    let r = node.publish("while-lost", b"x");
    println!(
        "rank {me}: publish without the store: {} after {} ms",
        match r {
            Ok(()) => "Ok".to_owned(),
            Err(e) => format!("Err({e})"),
        },
        started.elapsed().as_millis()
    );
    println!("rank {me}: waiting for the store");
    wait_for(node, timeout * 2, "StoreBack", |e| {
        matches!(e, MemberEvent::StoreBack { .. })
    })?;
    let inbox = node
        .registry()
        .alloc(SLOT, RegisterOptions::local().allow_remote_write())?;
    node.publish_remote(&format!("inbox-{me}"), &inbox.registration().remote()?)?;
    let theirs = node.fetch_remote(&format!("inbox-{other}"), timeout)?;
    let mark = node
        .registry()
        .register_buffer(vec![me as u8 + 1; SLOT], RegisterOptions::local())?;
    node.scope(|s| {
        let g = [Gather::of(&mark)?];
        s.post_write(PeerWriteWorkRequest::new(
            other,
            WriteWorkRequest::new(&g, theirs)?,
        ))?
        .wait(timeout)?;
        s.barrier(&all, timeout)?;
        Ok::<_, NodeError>(())
    })?;
    let got = inbox.to_vec();
    if got != vec![other as u8 + 1; SLOT] {
        return Err(config(format!(
            "rank {other}'s write did not land: {got:?}"
        )));
    }
    println!("rank {me}: wrote through rank {other}'s descriptor, fetched by name");
    Ok(())
}
