//! Steady-state posting and polling allocate nothing: counted by a global
//! allocator wrapper around the system one.

mod common;

use common::{WAIT, buf, pair, remote_rw};
use ferrovia_channel::{
    Gather, ReceiveWorkRequest, Scatter, SendWorkRequest, TransportError, WriteWorkRequest,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_testkit::{CountingAlloc, count_allocations};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn posting_and_polling_allocate_nothing_in_steady_state() {
    // The counter itself works.
    let ((), n) = count_allocations(|| drop(std::hint::black_box(vec![1u8; 3])));
    assert_eq!(n, 1);
    let (mut a, mut b) = pair();
    let src = buf(&a, &[5; 256], RegisterOptions::local());
    let mut inbox = buf(&b, &[0; 256], RegisterOptions::local());
    let target = buf(&b, &[0; 256], remote_rw());
    let remote = target.registration().remote().unwrap();
    const ROUNDS: usize = 500;
    const WARM_UP: usize = 10;
    let mut allocated = 0;
    b.scope(|rx| {
        let (bytes, reg) = inbox.split_mut();
        let mut chunks = bytes.chunks_mut(1);
        a.scope(|tx| {
            let g = [Gather::of(&src)?];
            let list = [WriteWorkRequest::new(&g, remote)?; 8];
            let mut round = |n: usize| -> Result<(), TransportError> {
                let chunk = chunks.next();
                let send = tx.post_write(WriteWorkRequest::new(&g, remote)?)?;
                send.wait(WAIT)?;
                tx.post_write_list(&list)?.wait(WAIT)?;
                if let Some(c) = chunk.filter(|_| n.is_multiple_of(2)) {
                    let r = rx.post_receive(ReceiveWorkRequest::new(Scatter::new(reg, c)?))?;
                    let g1 = [Gather::range(&src, 0..1)?];
                    tx.post_send(SendWorkRequest::new(&g1)?)?.spin_poll()?;
                    assert_eq!(r.wait(WAIT)?.byte_len(), 1);
                }
                Ok(())
            };
            // Warm up: any lazily sized state grows now.
            (0..WARM_UP).try_for_each(&mut round)?;
            let (r, n) = count_allocations(|| (WARM_UP..ROUNDS).try_for_each(&mut round));
            allocated = n;
            r
        })
        .map_err(|e| TransportError::Config(e.to_string()))
    })
    .unwrap();
    assert_eq!(
        allocated,
        0,
        "{allocated} allocations in {} steady-state rounds",
        ROUNDS - WARM_UP
    );
    assert_eq!(target.to_vec(), [5; 256]);
}
