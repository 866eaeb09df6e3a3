//! The passive side of a one-sided test. It must not spin: on soft-RoCE
//! the kernel answers reads and places writes on the same (v)CPUs, and a
//! spinning server slows it down (perftest's server sleeps too). So the
//! server sleeps in a receive until the client sends "done".

use ferrovia::{
    Node, NodeError, PeerReceiveWorkRequest, PeerSendWorkRequest, ReceiveWorkRequest,
    SendWorkRequest,
};

use crate::WAIT;

/// Server: sleeps until the client's zero-byte "done" arrives.
pub(crate) fn wait_for_client(node: &mut Node) -> Result<(), NodeError> {
    node.scope(|s| {
        s.post_receive(PeerReceiveWorkRequest::new(1, ReceiveWorkRequest::empty()))?
            .wait(WAIT * 10)?;
        Ok::<_, NodeError>(())
    })?;
    Ok(())
}

/// Client: tells the server it is done.
pub(crate) fn release_server(node: &mut Node) -> Result<(), NodeError> {
    node.scope(|s| {
        s.post_send(PeerSendWorkRequest::new(0, SendWorkRequest::new(&[])?))?
            .wait(WAIT)?;
        Ok::<_, NodeError>(())
    })?;
    Ok(())
}
