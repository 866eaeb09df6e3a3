//! Helpers of the in-process UCX tests: a world of connected channels and
//! one-shot writes and reads.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use ferrovia_channel::{
    ChannelConfig, Gather, MultiChannel, PeerReadWorkRequest, PeerWriteWorkRequest,
    ReadWorkRequest, Scatter, TransportError, WriteWorkRequest,
};
use ferrovia_mr::{
    Access, MrRegistry, RegisterOptions, RegisteredBuffer, RemoteMemoryRegion, Shared,
};
use ferrovia_types::WcClass;
use ferrovia_ucx::{UcxContext, UcxTransport, UcxTransportBuilder};

pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// UCX 1.13's shared memory transports.
pub(crate) const SHARED_MEMORY: &str = "sm,self";

/// `n` connected channels over tcp, as `n` ranks of one job would be, and
/// a handle on each transport.
pub(crate) fn world(n: usize) -> Vec<(MultiChannel, Arc<UcxTransport>)> {
    world_on(n, "tcp", UcxTransport::builder)
}

/// `n` connected channels over UCX transports `tls`, each transport
/// started from `builder()`.
pub(crate) fn world_on(
    n: usize,
    tls: &str,
    builder: impl Fn() -> UcxTransportBuilder,
) -> Vec<(MultiChannel, Arc<UcxTransport>)> {
    let ts: Vec<UcxTransport> = (0..n)
        .map(|_| {
            let ctx = UcxContext::with_options(&[("TLS", tls)]).expect("ucp_init");
            let mut b = builder();
            if tls != "tcp" {
                // UCX 1.13's shared memory has no peer failure handling.
                b = b.detect_peer_failure(false);
            }
            b.start(&ctx).expect("transport")
        })
        .collect();
    let addrs: Vec<Vec<u8>> = ts.iter().map(|t| t.address().to_vec()).collect();
    ts.into_iter()
        .enumerate()
        .map(|(i, t)| {
            t.connect(i, &addrs).expect("connect");
            let registry = MrRegistry::with_registrar(t.registrar());
            let t = Arc::new(t);
            let ch = MultiChannel::over(t.clone(), registry, ChannelConfig::default());
            (ch, t)
        })
        .collect()
}

pub(crate) fn buf<A: Access>(
    ch: &MultiChannel,
    bytes: &[u8],
    opts: RegisterOptions<A>,
) -> RegisteredBuffer<A> {
    ch.registry().register_buffer(bytes.to_vec(), opts).unwrap()
}

pub(crate) fn rw() -> RegisterOptions<Shared> {
    RegisterOptions::local()
        .allow_remote_read()
        .allow_remote_write()
}

pub(crate) fn class(e: &TransportError) -> Option<WcClass> {
    match e {
        TransportError::Completion(c) => Some(c.status.class()),
        _ => None,
    }
}

/// Ok, or the class of the completion error.
pub(crate) type Outcome = Result<(), Option<WcClass>>;

/// One write of `src` to `dst` at peer 1.
pub(crate) fn write(
    a: &mut MultiChannel,
    src: &RegisteredBuffer,
    dst: RemoteMemoryRegion,
) -> Outcome {
    a.scope(|tx| {
        let g = [Gather::of(src)?];
        tx.post_write(PeerWriteWorkRequest::new(
            1,
            WriteWorkRequest::new(&g, dst)?,
        ))?
        .wait(WAIT)
        .map(|_| ())
    })
    .map_err(|e| e.closure().and_then(class))
}

/// One read of `src` at peer 1 into `dst`.
pub(crate) fn read(
    a: &mut MultiChannel,
    dst: &mut RegisteredBuffer,
    src: RemoteMemoryRegion,
) -> Outcome {
    a.scope(|tx| {
        tx.post_read(PeerReadWorkRequest::new(
            1,
            ReadWorkRequest::new(Scatter::of(dst)?, src)?,
        ))?
        .wait(WAIT)
        .map(|_| ())
    })
    .map_err(|e| e.closure().and_then(class))
}
