//! A node of one rank in this process, and a loopback round on one of its
//! rails: what the rail tests of either backend share.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use ferrovia_channel::{
    ChannelConfig, Gather, MultiChannel, PeerReceiveWorkRequest, PeerSendWorkRequest,
    PeerWriteWorkRequest, ReceiveWorkRequest, Scatter, SendWorkRequest, WriteWorkRequest,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_node::{Backend, Node, NodeError, Rail};

pub const WAIT: Duration = Duration::from_secs(20);

/// Rank 0 of a world of one on `backend`: its rendezvous and control port
/// on loopback.
pub fn node(backend: Backend) -> Node {
    Node::builder(0, 1, "127.0.0.1:0")
        .token("rail-tests")
        .backend(backend)
        .bootstrap_timeout(Duration::from_secs(20))
        .build()
        .unwrap_or_else(|e| panic!("a node of one rank on {backend}: {e}"))
}

/// A channel over `rail`, and a send and a write to this rank itself on
/// it, checked.
pub fn loopback(rail: &Rail, seed: u8) -> Result<MultiChannel, NodeError> {
    let mut ch = MultiChannel::over(
        rail.transport().clone(),
        rail.registry().clone(),
        ChannelConfig::default(),
    );
    let data: Vec<u8> = (0..64).map(|i| seed.wrapping_add(i)).collect();
    let msg = rail
        .registry()
        .register_buffer(data.clone(), RegisterOptions::local())?;
    let mut inbox = rail.registry().alloc(64, RegisterOptions::local())?;
    let target = rail
        .registry()
        .alloc(64, RegisterOptions::local().allow_remote_write())?;
    let at = target.registration().remote()?;
    let got = ch.scope(|s| {
        let r = s.post_receive(PeerReceiveWorkRequest::new(
            0,
            ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
        ))?;
        let g = [Gather::of(&msg)?];
        s.post_send(PeerSendWorkRequest::new(0, SendWorkRequest::new(&g)?))?
            .wait(WAIT)?;
        s.post_write(PeerWriteWorkRequest::new(0, WriteWorkRequest::new(&g, at)?))?
            .wait(WAIT)?;
        Ok::<_, NodeError>(r.wait(WAIT)?.into_received().unwrap_or_default().to_vec())
    })?;
    assert_eq!(got, data, "the send on {}", rail.describe());
    assert_eq!(target.to_vec(), data, "the write on {}", rail.describe());
    Ok(ch)
}
