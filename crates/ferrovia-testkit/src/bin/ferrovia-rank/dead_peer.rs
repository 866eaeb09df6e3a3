//! `ferrovia-rank dead-peer`: three ranks; rank 2 leaves after a barrier,
//! and rank 0 reports how each kind of work with it ended (the test reads
//! the lines): every error must name rank 2, and once its connection is
//! known broken nothing may wait for it.

use std::time::{Duration, Instant};

use ferrovia_channel::{
    Gather, PeerReceiveWorkRequest, PeerSendWorkRequest, ReceiveWorkRequest, Scatter, ScopeError,
    SendWorkRequest, TransportError,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_node::{Node, NodeError, NodeScope};

const WAIT: Duration = Duration::from_secs(30);
const DEAD: usize = 2;

pub(crate) fn run(node: &mut Node, sends: bool) -> Result<(), NodeError> {
    let me = node.rank();
    if node.world_size() != 3 {
        return Err(NodeError::Transport(TransportError::Config(
            "dead-peer needs 3 ranks".into(),
        )));
    }
    if me != 0 {
        node.barrier(&[0, 1, 2], WAIT)?;
        if me == 1 {
            node.barrier(&[0, 1], WAIT)?;
        }
        return Ok(());
    }
    let mut inbox = node.registry().alloc(64, RegisterOptions::local())?;
    let msg = node
        .registry()
        .register_buffer(vec![7u8; 64], RegisterOptions::local())?;
    let ended = node.scope(|s| {
        // Rank 2 never sends: this receive can only end with an error.
        let never = s.post_receive(PeerReceiveWorkRequest::new(
            DEAD,
            ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
        ))?;
        s.barrier(&[0, 1, 2], WAIT)?;
        // 1. Sends until one fails: the error names the rank.
        let g = [Gather::of(&msg)?];
        let started = Instant::now();
        let failed = loop {
            if !sends {
                break "no sends".to_owned();
            }
            let sent = s
                .post_send(PeerSendWorkRequest::new(DEAD, SendWorkRequest::new(&g)?))
                .and_then(|h| h.wait(Duration::from_secs(2)));
            match sent {
                Ok(_) if started.elapsed() < Duration::from_secs(20) => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(_) => break "nothing failed in 20 s".to_owned(),
                Err(e) => break e.to_string(),
            }
        };
        println!("rank 0: work with rank 2 failed: {failed}");
        // 2. A barrier with it: the query gives up on it, or it is known
        // broken already.
        let t = Instant::now();
        let b = s.barrier(&[0, DEAD], Duration::from_secs(1));
        println!(
            "rank 0: barrier [0, 2] ended in {} ms: {b:?}",
            t.elapsed().as_millis()
        );
        // 3. Its connection is known broken now: a wait on it ends at once.
        let t = Instant::now();
        let w = never.wait(WAIT).map(|_| ()).map_err(|e| e.to_string());
        println!(
            "rank 0: the wait for rank 2's message ended in {} ms: {w:?}",
            t.elapsed().as_millis()
        );
        // 4. And so does a post to it.
        let t = Instant::now();
        let p = s
            .post_send(PeerSendWorkRequest::new(DEAD, SendWorkRequest::new(&g)?))
            .map(|_| ())
            .map_err(|e| e.to_string());
        println!(
            "rank 0: a send to rank 2 ended in {} ms: {p:?}",
            t.elapsed().as_millis()
        );
        Ok::<_, NodeError>(())
    });
    match ended {
        Ok(()) => {}
        // What failed with rank 2 unobserved (the sends of step 1).
        Err(ScopeError::Drain(d)) => println!("rank 0: the scope's drain: {d}"),
        Err(e) => return Err(e.into()),
    }
    node.barrier(&[0, 1], WAIT)?;
    println!("rank 0: done");
    Ok(())
}
