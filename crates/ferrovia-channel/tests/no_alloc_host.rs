//! Posting and polling allocate nothing in steady state, single requests
//! and lists alike: counted by a global allocator, through the counting
//! transport double (no device needed).

use std::hint::black_box;

use ferrovia_channel::engine::run_scope;
use ferrovia_channel::{
    ChannelConfig, Gather, PeerReceiveWorkRequest, PeerSendWorkRequest, PeerWriteWorkRequest,
    PollingScope, ReceiveWorkRequest, Scatter, SendWorkRequest, TransportError, Unpolled,
    WriteWorkRequest,
};
use ferrovia_mr::{RegisterOptions, RemoteMemoryRegion};
use ferrovia_testkit::{Counting, CountingAlloc, count_allocations};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

// One test in this binary: the counter sees every thread's allocations.
#[test]
fn single_posts_lists_and_receives_allocate_nothing_in_steady_state() {
    // The counter itself works.
    let ((), n) = count_allocations(|| drop(black_box(vec![1u8; 3])));
    assert_eq!(n, 1);
    let target =
        ferrovia_testkit::target(&Counting::with_inline(1, 256, 64), ChannelConfig::default());
    let registry = ferrovia_testkit::registry();
    let src = registry
        .register_buffer(vec![7u8; 4096], RegisterOptions::local())
        .unwrap();
    let mut inbox = registry
        .register_buffer(vec![0u8; 64], RegisterOptions::local())
        .unwrap();
    let remote = RemoteMemoryRegion::new(0x1000, 1 << 20, 2).unwrap();
    let (result, allocations) = run_scope(&target, Unpolled::Drain, |s| {
        let g = [Gather::range(&src, 0..64)?];
        let wrs = vec![WriteWorkRequest::new(&g, remote)?; 64];
        let mut scatter = Some(Scatter::of(&mut inbox)?);
        // Warm up: any lazily sized state grows now.
        for _ in 0..10 {
            round(s, &mut scatter, &wrs, &g)?;
        }
        Ok::<_, TransportError>(count_allocations(|| {
            (0..500).try_for_each(|_| round(s, &mut scatter, &wrs, &g))
        }))
    })
    .unwrap();
    result.unwrap();
    assert_eq!(
        allocations, 0,
        "{allocations} allocations in 500 steady-state rounds"
    );
}

/// One of each: a send, a write, lists of 64 and 16 writes, and a receive
/// reposted into the buffer the previous one handed back.
fn round<'env>(
    s: &mut PollingScope<'_, 'env, ferrovia_testkit::Target>,
    scatter: &mut Option<Scatter<'env>>,
    wrs: &[WriteWorkRequest<'_, 'env>],
    g: &[Gather<'env>],
) -> Result<(), TransportError> {
    let send = PeerSendWorkRequest::new(0, SendWorkRequest::new(g)?);
    s.post_send(send)?.spin_poll()?;
    s.post_write(PeerWriteWorkRequest::new(0, wrs[0]))?
        .spin_poll()?;
    s.post_write_list(0, wrs)?.spin_poll()?;
    s.post_write_list(0, &wrs[..16])?.spin_poll()?;
    let buf = scatter.take().expect("the buffer is back");
    let r = s.post_receive(PeerReceiveWorkRequest::new(0, ReceiveWorkRequest::new(buf)))?;
    *scatter = r.spin_poll()?.into_scatter();
    Ok(())
}
