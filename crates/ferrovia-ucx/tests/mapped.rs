//! The direct path over shared memory: puts, gets and atomics to memory
//! UCX allocated for a same-host peer are done on the peer's mapped
//! memory (`ucp_rkey_ptr`) inside the post. They land exactly where the
//! engine's would, a revoked key stops them before its acknowledgement,
//! and memory UCX cannot map (a registration of the program's own heap)
//! goes through the engine.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::{SHARED_MEMORY, WAIT, buf, class, world_on};
use ferrovia_channel::{
    AtomicWorkRequest, Gather, MultiChannel, PeerAtomicWorkRequest, PeerReadWorkRequest,
    PeerWriteWorkRequest, ReadWorkRequest, Scatter, TransportError, WriteWorkRequest,
};
use ferrovia_mr::{RegisterOptions, RemoteMemoryRegion, Shared};
use ferrovia_types::WcClass;
use ferrovia_ucx::UcxTransport;

const LEN: usize = 4096;
const CANARY: u8 = 0x5a;

fn exposed() -> RegisterOptions<Shared> {
    RegisterOptions::local()
        .allow_remote_read()
        .allow_remote_write()
        .allow_remote_atomic()
}

/// Writes two gathered pieces at 100 and reads them back, a fetch-add at
/// word 64 and two compare-and-swaps at word 65 (one matching, one not),
/// all to peer 1's `remote` (whose bytes start as `CANARY`, word 64 as 40
/// and word 65 as 7); checks what came back.
fn run_ops(a: &mut MultiChannel, remote: RemoteMemoryRegion) {
    let head = buf(a, &[1, 2, 3], RegisterOptions::local());
    let tail = buf(a, &[4, 5, 6, 7, 8], RegisterOptions::local());
    let mut back = buf(a, &[0; 8], RegisterOptions::local());
    let mut results = [0, 1, 2].map(|_| buf(a, &[0; 8], RegisterOptions::local()));
    a.scope(|s| {
        let g = [Gather::of(&head)?, Gather::of(&tail)?];
        let at = remote.sub_region(100, 8)?;
        s.post_write(PeerWriteWorkRequest::new(1, WriteWorkRequest::new(&g, at)?))?
            .wait(WAIT)?;
        s.post_read(PeerReadWorkRequest::new(
            1,
            ReadWorkRequest::new(Scatter::of(&mut back)?, at)?,
        ))?
        .wait(WAIT)?;
        let word = |i: u64| remote.sub_region(8 * i, 8);
        let [add, hit, miss] = &mut results;
        let mut old = Vec::new();
        for wr in [
            AtomicWorkRequest::fetch_add(Scatter::of(add)?, word(64)?, 2)?,
            AtomicWorkRequest::compare_swap(Scatter::of(hit)?, word(65)?, 7, 9)?,
            AtomicWorkRequest::compare_swap(Scatter::of(miss)?, word(65)?, 7, 11)?,
        ] {
            let done = s
                .post_atomic(PeerAtomicWorkRequest::new(1, wr))?
                .wait(WAIT)?;
            old.push(done.original_value());
        }
        assert_eq!(old, [Some(40), Some(7), Some(9)]);
        Ok::<_, TransportError>(())
    })
    .unwrap();
    assert_eq!(back.to_vec(), [1, 2, 3, 4, 5, 6, 7, 8]);
}

/// Peer 1's exposed region: `CANARY` everywhere, word 64 = 40, word 65 = 7.
fn prepare(words: &[AtomicU64]) {
    for w in words {
        w.store(u64::from_ne_bytes([CANARY; 8]), Ordering::Relaxed);
    }
    words[64].store(40, Ordering::Relaxed);
    words[65].store(7, Ordering::Relaxed);
}

/// What the ops of [`run_ops`] leave, canaries included.
fn check(words: &[AtomicU64]) {
    let bytes: Vec<u8> = words
        .iter()
        .flat_map(|w| w.load(Ordering::Relaxed).to_ne_bytes())
        .collect();
    for (i, &b) in bytes.iter().enumerate() {
        match i {
            100..108 => assert_eq!(b, (i - 99) as u8, "byte {i}"),
            512..528 => {}
            _ => assert_eq!(b, CANARY, "canary byte {i} was touched"),
        }
    }
    assert_eq!(words[64].load(Ordering::Relaxed), 42);
    assert_eq!(words[65].load(Ordering::Relaxed), 9);
}

fn mapped(t: &UcxTransport) -> u64 {
    t.post_stats().mapped
}

#[test]
fn puts_gets_and_atomics_on_mapped_memory_land_between_canaries() {
    let mut w = world_on(2, SHARED_MEMORY, UcxTransport::builder);
    let target = w[1].0.registry().alloc(LEN, exposed()).unwrap();
    prepare(target.as_atomic_u64s().unwrap());
    let remote = target.registration().remote().unwrap();
    let before = mapped(&w[0].1);
    run_ops(&mut w[0].0, remote);
    assert_eq!(
        mapped(&w[0].1) - before,
        5,
        "the write, the read and the three atomics took the direct path"
    );
    check(target.as_atomic_u64s().unwrap());
}

#[test]
fn memory_ucx_cannot_map_goes_through_the_engine() {
    let mut w = world_on(2, SHARED_MEMORY, UcxTransport::builder);
    // The program's own heap: UCX registers it (for its copy transports)
    // but attaches no segment a peer could map.
    let target = w[1]
        .0
        .registry()
        .register_buffer(vec![0u8; LEN], exposed())
        .unwrap();
    prepare(target.as_atomic_u64s().unwrap());
    let remote = target.registration().remote().unwrap();
    let before = mapped(&w[0].1);
    run_ops(&mut w[0].0, remote);
    assert_eq!(mapped(&w[0].1), before, "no op took the direct path");
    check(target.as_atomic_u64s().unwrap());
}

/// Rank 0 hammers rank 1's word with fetch-adds of 1 on the direct path
/// while rank 1 drops the registration. Once the drop returns (every peer
/// acknowledged the revocation) the word is read, and the hammering
/// thread's next adds must fail with a remote access error and leave the
/// word as it was: nothing lands after the acknowledgement.
#[test]
fn nothing_lands_after_a_revocation_is_acknowledged_while_a_peer_hammers() {
    let mut w = world_on(2, SHARED_MEMORY, UcxTransport::builder);
    let (b, t_b) = w.pop().expect("rank 1");
    let (mut a, t_a) = w.pop().expect("rank 0");
    for round in 0..10 {
        // Memory UCX allocated (mappable), registered a second time for
        // the peer: dropping that registration revokes its key while the
        // memory stays, to be looked at afterwards.
        let mut memory = b.registry().alloc(LEN, RegisterOptions::local()).unwrap();
        let word: *const AtomicU64 = memory.as_mut_ptr().cast();
        // SAFETY: the registration is dropped in this test, never leaked.
        let exposed =
            unsafe { b.registry().register_shared_slice(&mut memory, exposed()) }.unwrap();
        let remote = exposed.registration().remote().unwrap();
        let started = AtomicBool::new(false);
        let (outcome, settled, after) = std::thread::scope(|sc| {
            let h = sc.spawn(|| hammer(&mut a, remote, &started));
            while !started.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            // Returns once every peer that fetched the key acknowledged
            // its revocation.
            drop(exposed);
            // SAFETY: `memory` is alive (and page-aligned); every access
            // to the word is atomic.
            let settled = unsafe { &*word }.load(Ordering::SeqCst);
            let outcome = h.join().expect("the hammer");
            std::thread::sleep(std::time::Duration::from_millis(20));
            // SAFETY: as above.
            let after = unsafe { &*word }.load(Ordering::SeqCst);
            (outcome, settled, after)
        });
        drop(memory);
        let (landed, err) = outcome;
        assert_eq!(err, Some(WcClass::RemoteAccess), "round {round}");
        assert!(landed > 0, "round {round}: nothing landed before the drop");
        assert_eq!(
            settled, after,
            "round {round}: an add landed after the acknowledgement"
        );
        assert_eq!(
            after, landed,
            "round {round}: the word counts the adds that succeeded"
        );
        // An error breaks the channel's connection (as on verbs).
        a = MultiChannel::over(t_a.clone(), a.registry().clone(), Default::default());
    }
    assert!(mapped(&t_a) > 0, "the adds took the direct path");
    drop(t_b);
}

/// Fetch-adds of 1 to `remote` until one fails (or for [`WAIT`]): how
/// many succeeded, and the class of the failure.
fn hammer(
    a: &mut MultiChannel,
    remote: RemoteMemoryRegion,
    started: &AtomicBool,
) -> (u64, Option<WcClass>) {
    let mut result = buf(a, &[0; 8], RegisterOptions::local());
    let mut landed = 0;
    let err = a
        .scope(|s| {
            let mut scatter = Scatter::of(&mut result)?;
            let deadline = std::time::Instant::now() + WAIT;
            while std::time::Instant::now() < deadline {
                let wr = AtomicWorkRequest::fetch_add(scatter, remote, 1)?;
                let done = s
                    .post_atomic(PeerAtomicWorkRequest::new(1, wr))?
                    .wait(WAIT)?;
                landed += 1;
                started.store(true, Ordering::Release);
                scatter = done.into_scatter().expect("the result buffer");
            }
            Ok::<_, TransportError>(())
        })
        .err();
    (landed, err.and_then(|e| e.closure().and_then(class)))
}
