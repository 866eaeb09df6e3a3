//! `ferrovia-rank barrier-abandon`: three ranks. Rank 2 breaks its
//! connection to rank 0 (a receive from it that never comes, flushed at a
//! drain deadline), then all three enter `[0, 1, 2]`: rank 2 fails it at
//! once (it knows rank 0 is unreachable), and ranks 0 and 1 should hear
//! that it gave up rather than wait out their timeout. Each rank prints
//! how long its `[0, 1, 2]` took and why it failed (the test reads the
//! lines); then `[0, 1]` and `[1, 2]` pass: those pairs are untouched.

use std::time::{Duration, Instant};

use ferrovia_channel::{
    PeerReceiveWorkRequest, ReceiveWorkRequest, Scatter, ScopeError, TransportError,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_node::{Node, NodeError};

const WAIT: Duration = Duration::from_secs(30);

fn config_error(what: &str) -> NodeError {
    NodeError::Transport(TransportError::Config(what.into()))
}

pub(crate) fn run(node: &mut Node, timeout: Duration) -> Result<(), NodeError> {
    let me = node.rank();
    if node.world_size() != 3 {
        return Err(config_error("barrier-abandon needs 3 ranks"));
    }
    node.barrier(&[0, 1, 2], WAIT)?;
    if me == 2 {
        let mut inbox = node.registry().alloc(64, RegisterOptions::local())?;
        let r = node.scope(|s| {
            s.set_drain_deadline(Duration::from_millis(200));
            drop(s.post_receive(PeerReceiveWorkRequest::new(
                0,
                ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
            ))?);
            Ok::<_, NodeError>(())
        });
        match r {
            Err(ScopeError::Drain(_)) => println!("rank 2: flushed its connection to rank 0"),
            other => return Err(config_error(&format!("expected a flush, got {other:?}"))),
        }
    }
    // Ranks 0 and 1 enter [0, 1, 2] only once rank 2's connection is
    // broken (rank 1 learns it in [1, 2], rank 0 from rank 1 in [0, 1]), so
    // what they wait there is what it takes to hear that it gave up.
    if me != 0 {
        node.barrier(&[1, 2], WAIT)?;
    }
    if me != 2 {
        node.barrier(&[0, 1], WAIT)?;
    }
    let t = Instant::now();
    match node.barrier(&[0, 1, 2], timeout) {
        Ok(()) => return Err(config_error("[0, 1, 2] passed without rank 2")),
        Err(e) => println!(
            "rank {me}: [0, 1, 2] failed in {:.3} ms: {e}",
            t.elapsed().as_secs_f64() * 1e3
        ),
    }
    if me <= 1 {
        node.barrier(&[0, 1], WAIT)?;
    }
    if me >= 1 {
        node.barrier(&[1, 2], WAIT)?;
    }
    println!("rank {me}: the barriers after it passed");
    Ok(())
}
