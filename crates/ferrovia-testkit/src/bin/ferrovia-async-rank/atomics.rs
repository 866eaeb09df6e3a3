//! `atomics K`: every rank adds 1 to a counter of rank 0's K times with
//! fetch-and-add futures, all in flight at once, then takes one ticket
//! with compare-and-swap; rank 0 checks the sum and every rank that the
//! original values it saw are distinct. A transport without atomics must
//! refuse each one with a typed error naming the peer and hand the buffer
//! back (both backends run them now: verbs, and UCX's AMO64).

use ferrovia_async::AsyncNode;
use ferrovia_channel::TransportError;
use ferrovia_mr::{RegisterOptions, RemoteMemoryRegion, SharedBuffer};
use ferrovia_node::Node;
use tokio::task::JoinSet;

use crate::{Error, WAIT, everyone};

/// Rank 0's counter and ticket words, shared before going async.
pub(crate) fn expose(node: &mut Node) -> Result<(SharedBuffer, Vec<RemoteMemoryRegion>), Error> {
    let words = node
        .registry()
        .alloc(16, RegisterOptions::local().allow_remote_atomic())?;
    let remotes = node.all_gather_remote(words.registration().remote()?, WAIT)?;
    Ok((words, remotes))
}

pub(crate) async fn run(
    node: AsyncNode,
    words: SharedBuffer,
    remotes: Vec<RemoteMemoryRegion>,
    k: usize,
) -> Result<(), Error> {
    let (me, n) = (node.rank(), node.world_size());
    let counter = remotes[0].sub_region(0, 8)?;
    let ticket = remotes[0].sub_region(8, 8)?;
    let result = || node.registry().alloc(8, RegisterOptions::local());
    // One probe: does the transport run atomics at all?
    match node.fetch_add(0, result()?, 0..8, counter, 0).await {
        Ok(_) => {}
        Err(f) if matches!(f.error, TransportError::AtomicsUnsupported { peer: 0 }) => {
            if f.buf.len() != 8 || f.peer() != Some(0) {
                return Err(format!("a refused atomic: {f}").into());
            }
            node.barrier(&everyone(&node), WAIT).await?;
            println!("atomics unsupported rank {me}: refused naming peer 0, buffer back");
            return Ok(());
        }
        Err(f) => return Err(f.into()),
    }
    node.barrier(&everyone(&node), WAIT).await?;
    let mut set = JoinSet::new();
    for _ in 0..k {
        let op = node.fetch_add(0, result()?, 0..8, counter, 1);
        set.spawn(async move { op.await.map(|d| d.original_value()) });
    }
    let mut seen = Vec::with_capacity(k);
    while let Some(r) = tokio::time::timeout(WAIT, set.join_next())
        .await
        .map_err(|_| "atomics still pending after the deadline")?
    {
        seen.push(r?.map_err(|e| e.to_string())?.ok_or("no original value")?);
    }
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != k {
        return Err(format!("{} distinct original values of {k} fetch-adds", seen.len()).into());
    }
    // Tickets: compare-and-swap from 0 to this rank + 1 until it wins one.
    let mut expect = 0;
    loop {
        let done = node
            .compare_swap(0, result()?, 0..8, ticket, expect, expect + 1)
            .await?;
        let was = done.original_value().ok_or("no original value")?;
        if was == expect {
            break;
        }
        expect = was;
    }
    node.barrier(&everyone(&node), WAIT).await?;
    if me == 0 {
        let (sum, tickets) = (words.load_u64(0)?, words.load_u64(8)?);
        if sum != (k * n) as u64 || tickets != n as u64 {
            return Err(format!("counter {sum} (expected {}), tickets {tickets}", k * n).into());
        }
    }
    println!("atomics ok rank {me}: {k} fetch-adds in flight, distinct originals, ticket {expect}");
    Ok(())
}
