//! `stress OPS`: OPS operations across the job (writes, sends and their
//! receives, reads to and from every other rank), all in flight at once;
//! then every byte is checked.

use ferrovia_async::AsyncNode;
use ferrovia_mr::{RegisterOptions, RegisteredBuffer, RemoteMemoryRegion, SharedBuffer};
use ferrovia_node::Node;
use tokio::task::JoinSet;

use crate::{Error, WAIT, everyone, pattern};

/// Bytes each read brings.
const READ: usize = 64;
/// Bytes of the region every rank reads from.
const SOURCE: usize = 4096;

/// What each rank does with each other rank, and where.
pub(crate) struct Plan {
    writes: usize,
    sends: usize,
    reads: usize,
    board: SharedBuffer,
    source: SharedBuffer,
    boards: Vec<RemoteMemoryRegion>,
    sources: Vec<RemoteMemoryRegion>,
}

impl Plan {
    /// Splits `ops` (the job's total) over ranks and peers, and shares
    /// every rank's board and read source (before going async).
    pub(crate) fn new(node: &mut Node, ops: usize) -> Result<Plan, Error> {
        let n = node.world_size();
        let per_peer = ops.div_ceil(n * (n - 1).max(1)).max(5);
        let sends = (per_peer / 5).min(200);
        let reads = per_peer / 5;
        let writes = per_peer - 2 * sends - reads;
        let exposed = RegisterOptions::local()
            .allow_remote_write()
            .allow_remote_read();
        let board = node.registry().alloc(8 * n * writes, exposed)?;
        let source = node.registry().alloc(
            SOURCE,
            RegisterOptions::local().allow_remote_read().shared(),
        )?;
        source.write_from(0, &pattern(SOURCE, node.rank() as u64))?;
        let boards = node.all_gather_remote(board.registration().remote()?, WAIT)?;
        let sources = node.all_gather_remote(source.registration().remote()?, WAIT)?;
        Ok(Plan {
            writes,
            sends,
            reads,
            board,
            source,
            boards,
            sources,
        })
    }
}

/// What a finished operation brings to check: nothing (writes, sends),
/// a read's (peer, offset, bytes), or a receive's (peer, `usize::MAX`,
/// message).
type Outcome = Option<(usize, usize, Vec<u8>)>;

fn word(from: usize, i: usize) -> u64 {
    ((from as u64) << 32) | (i as u64 + 1)
}

fn buf(node: &AsyncNode, bytes: &[u8]) -> Result<RegisteredBuffer, Error> {
    Ok(node
        .registry()
        .register_buffer(bytes.to_vec(), RegisterOptions::local())?)
}

pub(crate) async fn run(node: AsyncNode, plan: Plan) -> Result<(), Error> {
    let (me, n) = (node.rank(), node.world_size());
    let peers: Vec<usize> = (0..n).filter(|&p| p != me).collect();
    // Receives first, everywhere, so no send finds none.
    let mut receives = Vec::new();
    for &p in &peers {
        for _ in 0..plan.sends {
            receives.push((p, node.receive(p, buf(&node, &[0; 16])?)));
        }
    }
    node.barrier(&everyone(&node), WAIT).await?;
    let mut set: JoinSet<Result<Outcome, String>> = JoinSet::new();
    let mut posted = receives.len();
    for &p in &peers {
        for i in 0..plan.writes {
            let dst = plan.boards[p].sub_region((8 * (me * plan.writes + i)) as u64, 8)?;
            let op = node.write(p, buf(&node, &word(me, i).to_ne_bytes())?, dst);
            set.spawn(async move { op.await.map(|_| None).map_err(|e| e.to_string()) });
        }
        for i in 0..plan.sends {
            let op = node.send(p, buf(&node, &word(me, i).to_ne_bytes())?);
            set.spawn(async move { op.await.map(|_| None).map_err(|e| e.to_string()) });
        }
        for i in 0..plan.reads {
            let at = (i * READ) % SOURCE;
            let src = plan.sources[p].sub_region(at as u64, READ as u64)?;
            let op = node.read(p, buf(&node, &[0; READ])?, src);
            set.spawn(async move {
                let done = op.await.map_err(|e| e.to_string())?;
                Ok(Some((p, at, done.bytes().to_vec())))
            });
        }
        posted += plan.writes + plan.sends + plan.reads;
    }
    for (p, op) in receives {
        set.spawn(async move {
            let done = op.await.map_err(|e| e.to_string())?;
            Ok(Some((p, usize::MAX, done.received().to_vec())))
        });
    }
    let mut next_seq = vec![0usize; n];
    while let Some(r) = tokio::time::timeout(WAIT, set.join_next())
        .await
        .map_err(|_| "operations still pending after the deadline")?
    {
        match r?? {
            None => {}
            Some((p, usize::MAX, msg)) => {
                let got = u64::from_ne_bytes(msg.as_slice().try_into()?);
                if got >> 32 != p as u64 {
                    return Err(format!("a message from {p} says it is from {}", got >> 32).into());
                }
                next_seq[p] += 1;
            }
            Some((p, at, bytes)) if bytes != pattern(SOURCE, p as u64)[at..at + READ] => {
                return Err(format!("a read of rank {p} at {at} brought other bytes").into());
            }
            Some(_) => {}
        }
    }
    node.barrier(&everyone(&node), WAIT).await?;
    for &p in &peers {
        if next_seq[p] != plan.sends {
            return Err(format!("{} of {} messages from {p}", next_seq[p], plan.sends).into());
        }
        for i in 0..plan.writes {
            let got = plan.board.load_u64(8 * (p * plan.writes + i))?;
            if got != word(p, i) {
                return Err(format!("rank {p}'s write {i}: {got:#x}").into());
            }
        }
    }
    let _ = &plan.source;
    // Under load a rank may never run out of work to sleep on; make it
    // wait once: ranks pair up (0-1, 2-3, ...), and in turn one waits for
    // a message the other sends after a pause.
    let partner = if me % 2 == 0 { me + 1 } else { me - 1 };
    if partner < n {
        for waiter in [0, 1] {
            if me % 2 == waiter {
                node.receive(partner, buf(&node, &[0; 8])?).await?;
            } else {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                node.send(partner, buf(&node, &[1; 8])?).await?;
            }
        }
    }
    // The reactor slept in the kernel and woke from the event fd.
    let wakes = node.event_wakes();
    if wakes == 0 && partner < n {
        return Err("the reactor never woke from the transport's event fd".into());
    }
    println!(
        "stress ok rank {me}: {posted} operations in flight at once, every byte checked, {wakes} kernel wake-ups"
    );
    Ok(())
}
