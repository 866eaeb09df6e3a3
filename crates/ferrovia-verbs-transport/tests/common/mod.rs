//! Set-up shared by the channel device tests.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use ferrovia_channel::{Channel, MultiChannel};
use ferrovia_mr::{Access, RegisterOptions, RegisteredBuffer, Shared};
use ferrovia_verbs::{ConnectOptions, Context, ProtectionDomain};
use ferrovia_verbs_transport::{VerbsBuilder, VerbsChannel, VerbsMultiChannel};

pub const WAIT: Duration = Duration::from_secs(20);

pub fn pd() -> ProtectionDomain {
    let ctx = Context::open_default()
        .unwrap_or_else(|e| panic!("device test found no usable RDMA device: {e}"));
    ProtectionDomain::new(&ctx).unwrap()
}

pub fn builder(pd: &ProtectionDomain) -> VerbsBuilder {
    VerbsBuilder::default().pd(pd)
}

/// Two channels connected to each other.
pub fn pair_with(opts: ConnectOptions, drain: Duration) -> (Channel, Channel) {
    let pd = pd();
    let mut a = builder(&pd)
        .connect_options(opts)
        .drain_deadline(drain)
        .build()
        .unwrap();
    let mut b = builder(&pd)
        .connect_options(opts)
        .drain_deadline(drain)
        .build()
        .unwrap();
    let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
    a.connect(&eb).unwrap();
    b.connect(&ea).unwrap();
    (a, b)
}

pub fn pair() -> (Channel, Channel) {
    pair_with(ConnectOptions::default(), Duration::from_secs(10))
}

/// A MultiChannel with `n` peers, each connected to its own Channel.
pub fn star(n: usize) -> (MultiChannel, Vec<Channel>) {
    star_with(n, |b| b)
}

/// Like [`star`], with the hub built by `hub(builder)`.
pub fn star_with(
    n: usize,
    hub: impl FnOnce(VerbsBuilder) -> VerbsBuilder,
) -> (MultiChannel, Vec<Channel>) {
    let pd = pd();
    let mut m = hub(builder(&pd)).build_multi(n).unwrap();
    let mut leaves = Vec::new();
    for i in 0..n {
        let mut c = builder(&pd).build().unwrap();
        c.connect(&m.endpoint(i).unwrap()).unwrap();
        m.connect(i, &c.endpoint().unwrap()).unwrap();
        leaves.push(c);
    }
    (m, leaves)
}

pub fn buf<A: Access>(ch: &Channel, data: &[u8], opts: RegisterOptions<A>) -> RegisteredBuffer<A> {
    ch.registry().register_buffer(data.to_vec(), opts).unwrap()
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

pub fn remote_rw() -> RegisterOptions<Shared> {
    RegisterOptions::local()
        .allow_remote_read()
        .allow_remote_write()
}
