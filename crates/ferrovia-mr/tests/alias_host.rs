//! One buffer registered with several registries (one per rail: another
//! device's protection domain, another UCX worker), through a registrar
//! double: the alias has keys of its own, keeps the bytes allocated while
//! it lives, and stops the buffer from becoming plain memory meanwhile.

use std::sync::atomic::Ordering::SeqCst;

use ferrovia_mr::{MrError, MrRegistry, RegisterOptions};
use ferrovia_testkit::FakeRegistrar;

#[test]
fn an_alias_has_its_own_keys_over_the_same_bytes() {
    let (a, fa) = (FakeRegistrar::default(), FakeRegistrar::default());
    let (rail0, rail1) = (
        MrRegistry::with_registrar(fa.clone()),
        MrRegistry::with_registrar(a.clone()),
    );
    let buf = rail0
        .alloc(
            1 << 16,
            RegisterOptions::local().allow_remote_read().zero_based(),
        )
        .unwrap();
    let alias = rail1
        .register_alias(
            &buf,
            RegisterOptions::local().allow_remote_read().zero_based(),
        )
        .unwrap();
    assert_eq!((alias.addr(), alias.len()), (buf.addr(), buf.len()));
    assert_ne!(alias.lkey(), 0);
    assert_eq!(alias.rdma_base(), 0, "zero-based like the original");
    // The other registry finds views of the bytes under its own keys.
    let v = rail1.view(buf.addr() + 4096, 100).unwrap();
    assert_eq!((v.lkey, v.rdma_addr), (alias.lkey(), 4096));
    assert_eq!(a.live.load(SeqCst), 1);
    // The bytes outlive the buffer while the alias lives: dropping the
    // buffer deregisters nothing yet.
    drop(buf);
    assert_eq!(fa.live.load(SeqCst), 1, "the original stays registered");
    drop(alias);
    assert_eq!((a.live.load(SeqCst), fa.live.load(SeqCst)), (0, 0));
}

#[test]
fn shared_memory_with_an_alias_cannot_become_plain_memory() {
    let (f0, f1) = (FakeRegistrar::default(), FakeRegistrar::default());
    let (rail0, rail1) = (
        MrRegistry::with_registrar(f0),
        MrRegistry::with_registrar(f1),
    );
    let inbox = rail0
        .alloc(64, RegisterOptions::local().allow_remote_write())
        .unwrap();
    let alias = rail1
        .register_alias(&inbox, RegisterOptions::local().allow_remote_write())
        .unwrap();
    let inbox = match inbox.into_local(RegisterOptions::local()) {
        Err(e) => {
            assert!(
                matches!(e.error(), MrError::StillShared { .. }),
                "{:?}",
                e.error()
            );
            e.into_buffer()
        }
        Ok(_) => panic!("a peer could still write through the alias's key"),
    };
    drop(alias);
    assert!(inbox.into_local(RegisterOptions::local()).is_ok());
}
