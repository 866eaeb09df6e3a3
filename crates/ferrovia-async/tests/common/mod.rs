//! In-process worlds for the async tests: `n` channels over UCX, each
//! driven by an async engine on the test's runtime.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use ferrovia_async::{Async, AsyncConfig, AsyncMultiChannel};
use ferrovia_channel::{ChannelConfig, MultiChannel};
use ferrovia_mr::{MrRegistry, RegisterOptions, RegisteredBuffer, Shared};
use ferrovia_ucx::{UcxContext, UcxTransport};

pub const WAIT: Duration = Duration::from_secs(20);

/// `n` async channels over UCX transports `tls`, connected to each other.
/// Call inside a runtime.
pub fn world(n: usize, tls: &str, cfg: AsyncConfig) -> Vec<AsyncMultiChannel> {
    world_pooled(n, tls, cfg, 0)
}

/// [`world`] with a shared receive pool of `pool` receives in each
/// channel (0: none, receives per peer).
pub fn world_pooled(n: usize, tls: &str, cfg: AsyncConfig, pool: u32) -> Vec<AsyncMultiChannel> {
    world_configured(n, tls, cfg, pool, ChannelConfig::default())
}

/// [`world_pooled`] with the channels' configuration `channel`.
pub fn world_configured(
    n: usize,
    tls: &str,
    cfg: AsyncConfig,
    pool: u32,
    channel: ChannelConfig,
) -> Vec<AsyncMultiChannel> {
    let ts: Vec<UcxTransport> = (0..n)
        .map(|_| {
            let ctx = UcxContext::with_options(&[("TLS", tls)]).expect("ucp_init");
            let mut b = UcxTransport::builder().shared_receives(pool);
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
            let ch = MultiChannel::over(Arc::new(t), registry, channel.clone());
            Async::with_config(ch, cfg.clone()).expect("async engine")
        })
        .collect()
}

pub fn local(a: &AsyncMultiChannel, bytes: &[u8]) -> RegisteredBuffer {
    a.registry()
        .register_buffer(bytes.to_vec(), RegisterOptions::local())
        .unwrap()
}

pub fn exposed(a: &AsyncMultiChannel, len: usize) -> RegisteredBuffer<Shared> {
    a.registry()
        .alloc(
            len,
            RegisterOptions::local()
                .allow_remote_read()
                .allow_remote_write(),
        )
        .unwrap()
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A small deterministic generator (the tests' random points).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
