//! Submitting a prepared list allocates nothing: after a first batch has
//! warmed the engine (its slot tables, the pieces' tag table), 20 more
//! batches of 10,000 entries over two rails, scoped and owned, make no
//! heap allocation (counted with a global allocator), through the
//! counting double.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use ferrovia_channel::transport::Transport;
use ferrovia_mr::RegisterOptions;
use ferrovia_testkit::{Counting, registry};
use ferrovia_transfer::{DescriptorList, Op, TransferEngine};

struct CountingAlloc;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            ALLOCATIONS.fetch_add(1, Relaxed);
        }
        // SAFETY: the caller's layout, as GlobalAlloc::alloc asks.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: allocated by System with this layout above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

const ENTRIES: usize = 10_000;
const ENTRY: usize = 64;

#[test]
fn submitting_a_prepared_list_allocates_nothing() {
    let transports: Vec<Arc<dyn Transport>> = (0..2)
        .map(|_| Counting::new(1, 4096) as Arc<dyn Transport>)
        .collect();
    let engine = TransferEngine::builder()
        .over_rails(0, 1, transports, vec![registry(), registry()])
        .unwrap();
    let mut seg = engine
        .alloc(ENTRIES * ENTRY, RegisterOptions::local())
        .unwrap();
    let target = engine
        .alloc(ENTRIES * ENTRY, ferrovia_transfer::target_options())
        .unwrap();
    let remotes = vec![target.remote().unwrap()];
    let mut list = DescriptorList::with_capacity(ENTRIES);
    for i in 0..ENTRIES {
        list.push(i * ENTRY..(i + 1) * ENTRY, 0, (i * ENTRY) as u64);
    }
    let prepared = engine.prepare(&seg, &list, &remotes).unwrap();
    let lease = seg.lease_mut();
    let t = Duration::from_secs(30);
    let (allocations, bytes) = engine
        .scope(|s| {
            s.submit(&prepared, &lease, Op::Write, None)?.wait(t)?;
            COUNTING.store(true, Relaxed);
            let mut bytes = 0;
            for _ in 0..20 {
                bytes += s.submit(&prepared, &lease, Op::Write, None)?.wait(t)?.bytes;
            }
            COUNTING.store(false, Relaxed);
            Ok((ALLOCATIONS.swap(0, Relaxed), bytes))
        })
        .unwrap();
    assert_eq!(bytes, (20 * ENTRIES * ENTRY) as u64);
    assert_eq!(allocations, 0, "scoped batches allocated");
    drop(lease);
    // Owned: the list goes into the batch and comes back.
    let lease = seg.into_lease();
    let mut prepared = engine.submit(prepared, &lease, Op::Write, None).unwrap();
    prepared.wait(t).unwrap();
    let mut prepared = prepared.into_list().unwrap();
    COUNTING.store(true, Relaxed);
    for _ in 0..20 {
        let mut batch = engine.submit(prepared, &lease, Op::Write, None).unwrap();
        batch.wait(t).unwrap();
        prepared = batch.into_list().unwrap();
    }
    COUNTING.store(false, Relaxed);
    assert_eq!(ALLOCATIONS.load(Relaxed), 0, "owned batches allocated");
}
