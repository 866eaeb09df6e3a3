//! `killed`: rank 2 is killed (by the test, once every rank printed
//! `ready`) while the others have receives from it pending and keep
//! writing to it. Every future involving rank 2 must fail with a typed
//! error naming it: completions with its peer index (a failed write, the
//! flushed receives), `Broken { peer: 2 }`, and a barrier that names it.

use std::time::Duration;

use ferrovia_async::AsyncNode;
use ferrovia_channel::TransportError;
use ferrovia_mr::RegisterOptions;
use ferrovia_node::{AbandonCause, BarrierError};

use crate::{Error, WAIT, everyone};

const VICTIM: usize = 2;

pub(crate) async fn run(node: AsyncNode) -> Result<(), Error> {
    let me = node.rank();
    let reg = node.registry().clone();
    let buf = |n: usize| reg.register_buffer(vec![0u8; n], RegisterOptions::local());
    let pending: Vec<_> = (0..8)
        .map(|_| buf(64).map(|b| node.receive(VICTIM, b)))
        .collect::<Result<_, _>>()?;
    node.barrier(&everyone(&node), WAIT).await?;
    println!("ready rank {me}");
    if me == VICTIM {
        // Killed by the test; never gets further.
        tokio::time::sleep(WAIT).await;
        return Err("rank 2 was not killed".into());
    }
    // Keep writing to it while it dies; the barrier meanwhile names it.
    let board = node
        .registry()
        .alloc(8, RegisterOptions::local().allow_remote_write())?;
    let remote = board.registration().remote()?;
    // Each send with a deadline: over UCX 1.13's shared memory (no peer
    // failure handling) a send towards a dead rank can stay pending even
    // after its endpoint is force-closed; the timed-out future leaves its
    // buffer to the engine, and the next send finds the peer broken.
    let writes = async {
        loop {
            match tokio::time::timeout(Duration::from_secs(1), node.send(VICTIM, buf(8)?)).await {
                Ok(Ok(_)) => tokio::time::sleep(Duration::from_millis(5)).await,
                Ok(Err(f)) => return Ok::<_, Error>(f),
                Err(_) => {}
            }
        }
    };
    let barrier = node.barrier(&everyone(&node), Duration::from_secs(2));
    let (failed, barrier) = tokio::join!(
        tokio::time::timeout(WAIT, writes),
        tokio::time::timeout(WAIT, barrier)
    );
    let failed = failed.map_err(|_| "sends to the dead rank never failed")??;
    if failed.peer() != Some(VICTIM) {
        return Err(format!("a send to the dead rank failed without naming it: {failed}").into());
    }
    match barrier.map_err(|_| "the barrier never returned")? {
        Err(BarrierError::Timeout { missing, .. })
        | Err(BarrierError::Unreachable { missing, .. })
            if missing == [VICTIM] => {}
        Err(BarrierError::Incomplete { rank: VICTIM, .. }) => {}
        // Another rank gave up on it first and said so.
        Err(BarrierError::Abandoned {
            because: AbandonCause::Missing(VICTIM) | AbandonCause::Unreachable(VICTIM),
            ..
        }) => {}
        other => return Err(format!("the barrier did not name rank {VICTIM}: {other:?}").into()),
    }
    for op in pending {
        match tokio::time::timeout(WAIT, op).await? {
            Err(f) if f.peer() == Some(VICTIM) => {}
            Err(f) => return Err(format!("a receive failed without naming rank 2: {f}").into()),
            Ok(_) => return Err("a receive from the dead rank completed".into()),
        }
    }
    // Later operations fail at once, naming it.
    match node.write(VICTIM, buf(8)?, remote).await {
        Err(f) if matches!(f.error, TransportError::Broken { peer: VICTIM }) => {}
        other => return Err(format!("a write after the death: {:?}", other.map(drop)).into()),
    }
    println!("killed ok rank {me}: every pending and later future named rank {VICTIM}: {failed}");
    Ok(())
}
