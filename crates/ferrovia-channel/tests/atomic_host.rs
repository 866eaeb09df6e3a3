//! Remote atomics' typed errors before anything is posted, on the host
//! through the transport double (which runs no atomics).

use ferrovia_channel::engine::run_scope;
use ferrovia_channel::{
    AtomicWorkRequest, ChannelConfig, PeerAtomicWorkRequest, Scatter, TransportError, Unpolled,
};
use ferrovia_mr::{RegisterOptions, RemoteMemoryRegion};
use ferrovia_testkit::{Double, Mode};

#[test]
fn bad_atomics_are_typed_errors_before_posting() {
    let double = Double::new(1, 8, Mode::Instant);
    let target = ferrovia_testkit::target(&double, ChannelConfig::default());
    let registry = ferrovia_testkit::registry();
    let mut result = registry
        .register_buffer(vec![0u8; 16], RegisterOptions::local())
        .unwrap();
    let word = RemoteMemoryRegion::new(0x1000, 64, 7).unwrap();
    // A result buffer that is not 8 bytes.
    let e = AtomicWorkRequest::fetch_add(Scatter::of(&mut result).unwrap(), word, 1).unwrap_err();
    assert!(
        matches!(e, TransportError::AtomicResultSize { len: 16 }),
        "{e}"
    );
    // A remote word that is not 8-byte aligned.
    let odd = RemoteMemoryRegion::new(0x1004, 64, 7).unwrap();
    let e = AtomicWorkRequest::compare_swap(Scatter::range(&mut result, 0..8).unwrap(), odd, 0, 1)
        .unwrap_err();
    assert!(
        matches!(e, TransportError::MisalignedAtomic { addr: 0x1004 }),
        "{e}"
    );
    // A remote region shorter than a word.
    let short = RemoteMemoryRegion::new(0x1000, 4, 7).unwrap();
    let e = AtomicWorkRequest::fetch_add(Scatter::range(&mut result, 0..8).unwrap(), short, 1)
        .unwrap_err();
    assert!(
        matches!(
            e,
            TransportError::RemoteTooSmall {
                local: 8,
                remote: 4
            }
        ),
        "{e}"
    );
    // A transport without atomics refuses before posting.
    let r = run_scope(&target, Unpolled::Drain, |s| {
        let wr = AtomicWorkRequest::fetch_add(Scatter::range(&mut result, 0..8)?, word, 1)?;
        s.post_atomic(PeerAtomicWorkRequest::new(0, wr)).map(drop)
    });
    assert!(
        matches!(
            r.as_ref().err().and_then(|e| e.closure()),
            Some(TransportError::AtomicsUnsupported { peer: 0 })
        ),
        "{r:?}"
    );
    assert_eq!(double.posted.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[test]
fn requests_the_owner_did_not_allow_are_refused_before_posting() {
    use ferrovia_channel::{Gather, ReadWorkRequest, WriteWorkRequest};
    use ferrovia_types::AccessFlags;

    let registry = ferrovia_testkit::registry();
    let readable = registry
        .register_buffer(vec![0u8; 64], RegisterOptions::local().allow_remote_read())
        .unwrap();
    let writable = registry
        .alloc(64, RegisterOptions::local().allow_remote_write())
        .unwrap();
    let read_only = readable.registration().remote().unwrap();
    let write_only = writable.registration().remote().unwrap();
    assert_eq!(read_only.access(), AccessFlags::REMOTE_READ);
    assert_eq!(write_only.access(), AccessFlags::REMOTE_WRITE);
    // The rights travel with the descriptor, through its wire form too.
    let read_only = RemoteMemoryRegion::decode(&read_only.encode()).unwrap();

    let mut local = registry
        .register_buffer(vec![1u8; 8], RegisterOptions::local())
        .unwrap();
    let g = [Gather::of(&local).unwrap()];
    let e = WriteWorkRequest::new(&g, read_only).unwrap_err();
    assert!(
        matches!(
            e,
            TransportError::RemoteAccessDenied {
                op: "an RDMA write",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("REMOTE_READ"), "{e}");
    let e = ReadWorkRequest::new(Scatter::of(&mut local).unwrap(), write_only).unwrap_err();
    assert!(
        matches!(
            e,
            TransportError::RemoteAccessDenied {
                op: "an RDMA read",
                ..
            }
        ),
        "{e}"
    );
    let e =
        AtomicWorkRequest::fetch_add(Scatter::of(&mut local).unwrap(), write_only, 1).unwrap_err();
    assert!(
        matches!(
            e,
            TransportError::RemoteAccessDenied {
                op: "a remote atomic",
                ..
            }
        ),
        "{e}"
    );
    // A descriptor built by hand claims every right: the device decides.
    let raw = RemoteMemoryRegion::new(0x1000, 64, 7).unwrap();
    assert!(AtomicWorkRequest::fetch_add(Scatter::of(&mut local).unwrap(), raw, 1).is_ok());
}

#[test]
fn atomics_on_shared_memory_that_starts_unaligned_need_an_aligned_word() {
    // Shared memory may start anywhere (a Vec<u8>); its descriptor's first
    // byte is then no word, and an atomic there is refused before posting.
    // The aligned word inside it is the owner's `load_u64` word too.
    let registry = ferrovia_testkit::registry();
    let mut backing = vec![0u64; 4];
    // SAFETY: u8 has no alignment or validity requirements; same memory,
    // same exclusive borrow.
    let bytes = unsafe { std::slice::from_raw_parts_mut(backing.as_mut_ptr().cast::<u8>(), 32) };
    // SAFETY: the registration is dropped in this test, never leaked.
    let words = unsafe {
        registry.register_shared_slice(
            &mut bytes[3..27],
            RegisterOptions::local().allow_remote_atomic(),
        )
    }
    .unwrap();
    let remote = words.registration().remote().unwrap();
    let mut result = registry
        .register_buffer(vec![0u8; 8], RegisterOptions::local())
        .unwrap();
    let e = AtomicWorkRequest::fetch_add(Scatter::of(&mut result).unwrap(), remote, 1).unwrap_err();
    assert!(matches!(e, TransportError::MisalignedAtomic { .. }), "{e}");
    let word = remote.sub_region(5, 8).unwrap();
    assert_eq!(word.addr() % 8, 0);
    AtomicWorkRequest::fetch_add(Scatter::of(&mut result).unwrap(), word, 1).unwrap();
    words.store_u64(5, 41).unwrap();
    assert_eq!(words.load_u64(5).unwrap(), 41);
}
