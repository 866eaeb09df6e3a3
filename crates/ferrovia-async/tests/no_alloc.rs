//! A single async operation allocates nothing in steady state: sends,
//! receives, writes and reads awaited one at a time on a
//! current-thread runtime, with the default wake-up and with busy polling,
//! counted by a global allocator over a transport double that completes
//! every op at once (so only ferrovia's path is counted; it has no
//! atomics, which take the same owned path as a read).

use ferrovia_async::{Async, AsyncConfig};
use ferrovia_channel::{ChannelConfig, MultiChannel};
use ferrovia_mr::{RegisterOptions, RegisteredBuffer, RemoteMemoryRegion};
use ferrovia_testkit::{Counting, CountingAlloc, count_allocations};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const ROUNDS: usize = 1000;

/// The buffers a round moves through its operations and gets back.
struct Bufs {
    src: RegisteredBuffer,
    dst: RegisteredBuffer,
}

async fn round(a: &Async<MultiChannel>, b: Bufs, remote: RemoteMemoryRegion) -> Bufs {
    let src = a.send(0, b.src).await.expect("send").into_buf();
    let dst = a.receive(0, b.dst).await.expect("receive").into_buf();
    let src = a.write(0, src, remote).await.expect("write").into_buf();
    let dst = a.read(0, dst, remote).await.expect("read").into_buf();
    Bufs { src, dst }
}

/// Allocations of `rounds` steady-state rounds under `cfg`, the runtime's
/// entry into `block_on` included (a fixed cost, not one per operation).
fn allocations_of(cfg: &AsyncConfig, rounds: usize) -> usize {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ch = MultiChannel::over(
        Counting::new(1, 256),
        ferrovia_testkit::registry(),
        ChannelConfig::default(),
    );
    // The reactor is a task of the runtime it is created in.
    let a = {
        let _in = rt.enter();
        Async::with_config(ch, cfg.clone()).unwrap()
    };
    let local = |len| {
        a.registry()
            .register_buffer(vec![0u8; len], RegisterOptions::local())
            .unwrap()
    };
    let remote = RemoteMemoryRegion::new(0x1000, 1 << 20, 2).unwrap();
    let mut b = Bufs {
        src: local(64),
        dst: local(64),
    };
    // Warm up: any lazily sized state grows now.
    b = rt.block_on(async {
        for _ in 0..20 {
            b = round(&a, b, remote).await;
        }
        b
    });
    let (_, n) = count_allocations(|| {
        rt.block_on(async {
            for _ in 0..rounds {
                b = round(&a, b, remote).await;
            }
            b
        })
    });
    n
}

// One test in this binary: the counter sees every thread's allocations.
#[test]
fn single_operations_allocate_nothing_in_steady_state() {
    let ((), n) = count_allocations(|| drop(std::hint::black_box(vec![1u8; 3])));
    assert_eq!(n, 1, "the counter counts");
    for (name, cfg) in [
        ("the default wake-up", AsyncConfig::default()),
        ("busy polling", AsyncConfig::default().busy_poll()),
    ] {
        let (few, many) = (allocations_of(&cfg, 10), allocations_of(&cfg, ROUNDS));
        assert_eq!(
            few, many,
            "with {name}: {few} allocations in 10 rounds of four single operations, {many} in {ROUNDS}"
        );
    }
}
