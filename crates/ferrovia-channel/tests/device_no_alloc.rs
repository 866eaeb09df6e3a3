//! Steady-state posting and polling allocate nothing: counted by a global
//! allocator wrapper around the system one.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

use common::{WAIT, buf, pair, remote_rw};
use ferrovia_channel::{
    Gather, ReceiveWorkRequest, Scatter, SendWorkRequest, TransportError, WriteWorkRequest,
};
use ferrovia_mr::RegisterOptions;

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; it only
// counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            ALLOCATIONS.fetch_add(1, Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            ALLOCATIONS.fetch_add(1, Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn posting_and_polling_allocate_nothing_in_steady_state() {
    // The counter itself works: one allocation is seen.
    COUNTING.store(true, Relaxed);
    std::hint::black_box(vec![1u8; 3]);
    COUNTING.store(false, Relaxed);
    assert_eq!(ALLOCATIONS.swap(0, Relaxed), 1);

    let (mut a, mut b) = pair();
    let src = buf(&a, &[5; 256], RegisterOptions::local());
    let mut inbox = buf(&b, &[0; 256], RegisterOptions::local());
    let target = buf(&b, &[0; 256], remote_rw());
    let remote = target.registration().remote().unwrap();
    const ROUNDS: usize = 500;
    let mut allocated = 0;
    b.scope(|rx| {
        let (bytes, reg) = inbox.split_mut();
        let mut chunks = bytes.chunks_mut(1);
        a.scope(|tx| {
            let g = [Gather::of(&src)?];
            for round in 0..ROUNDS {
                // Count only after a warm-up round has grown any lazily
                // sized state.
                if round == 10 {
                    ALLOCATIONS.store(0, Relaxed);
                    COUNTING.store(true, Relaxed);
                }
                let chunk = chunks.next();
                let send = tx.post_write(WriteWorkRequest::new(&g, remote)?)?;
                send.wait(WAIT)?;
                if let Some(c) = chunk.filter(|_| round % 2 == 0) {
                    let r = rx.post_receive(ReceiveWorkRequest::new(Scatter::new(reg, c)?))?;
                    let g1 = [Gather::range(&src, 0..1)?];
                    tx.post_send(SendWorkRequest::new(&g1)?)?.spin_poll()?;
                    assert_eq!(r.wait(WAIT)?.byte_len(), 1);
                }
            }
            COUNTING.store(false, Relaxed);
            allocated = ALLOCATIONS.load(Relaxed);
            Ok::<_, TransportError>(())
        })
        .map_err(|e| TransportError::Config(e.to_string()))
    })
    .unwrap();
    assert_eq!(
        allocated,
        0,
        "{allocated} allocations in {} steady-state rounds",
        ROUNDS - 10
    );
    assert_eq!(target.to_vec(), [5; 256]);
}
