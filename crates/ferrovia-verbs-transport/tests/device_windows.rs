//! Device tests of memory windows through the channel's verbs backend
//! (type 2 on soft-RoCE): a peer gets fewer rights than the registration
//! has, invalidating revokes them in one request, a stale access fails
//! with IBV_WC_REM_ACCESS_ERR and touches nothing, and no window makes
//! memory writable that the registration keeps `Local`. Run by
//! `cargo xtask test`.

mod common;

use common::{WAIT, pair};
use ferrovia_channel::{Gather, Scatter, TransportError};
use ferrovia_mr::{MrError, RegisterOptions, RemoteMemoryRegion};
use ferrovia_verbs::{AccessFlags, WcClass};
use ferrovia_verbs_transport::VerbsWindows;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// The completion class of a failed operation.
fn class(e: &TransportError) -> WcClass {
    match e {
        TransportError::Completion(c) => c.status.class(),
        other => panic!("expected a completion error, got {other}"),
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_window_grants_a_peer_fewer_rights_than_the_registration() {
    let (mut a, b) = pair();
    let target = b
        .registry()
        .alloc(
            4096,
            RegisterOptions::local()
                .allow_remote_read()
                .allow_remote_write()
                .allow_memory_windows(),
        )
        .unwrap();
    target.write_from(0, &pattern(4096, 5)).unwrap();
    let reg = target.registration().clone();
    let w = b
        .bind_window(0, &reg, 1024..2048, AccessFlags::REMOTE_READ, WAIT)
        .unwrap();
    let desc = w.remote().unwrap();
    assert_eq!(desc.len(), 1024);
    assert_ne!(desc.rkey(), reg.rkey(), "the window has a key of its own");
    assert_eq!(desc.access(), AccessFlags::REMOTE_READ);

    // Reading through the window works.
    let mut back = a.registry().alloc(1024, RegisterOptions::local()).unwrap();
    a.read(Scatter::of(&mut back).unwrap(), desc).unwrap();
    assert_eq!(&back[..], &pattern(4096, 5)[1024..2048]);

    // A ferrovia peer refuses to write through it before posting...
    let src = a
        .registry()
        .register_buffer(vec![0xee; 64], RegisterOptions::local())
        .unwrap();
    let err = a.write(&[Gather::of(&src).unwrap()], desc).unwrap_err();
    assert!(
        matches!(err, TransportError::RemoteAccessDenied { .. }),
        "{err}"
    );
    // ...and a descriptor made by hand (claiming every right) is refused
    // by the owner's device, with nothing written.
    let forged = RemoteMemoryRegion::new(desc.addr(), desc.len(), desc.rkey()).unwrap();
    let err = a.write(&[Gather::of(&src).unwrap()], forged).unwrap_err();
    assert_eq!(class(&err), WcClass::RemoteAccess, "{err}");
    assert_eq!(target.to_vec(), pattern(4096, 5), "nothing was written");
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn invalidating_revokes_at_once_and_a_stale_write_touches_nothing() {
    let (mut a, b) = pair();
    let target = b
        .registry()
        .alloc(
            4096,
            RegisterOptions::local()
                .allow_remote_write()
                .allow_memory_windows(),
        )
        .unwrap();
    let reg = target.registration().clone();
    let mut w = b
        .bind_window(0, &reg, 0..4096, AccessFlags::REMOTE_WRITE, WAIT)
        .unwrap();
    let desc = w.remote().unwrap();
    let src = a
        .registry()
        .register_buffer(pattern(256, 9), RegisterOptions::local())
        .unwrap();
    a.write(&[Gather::of(&src).unwrap()], desc).unwrap();
    assert_eq!(target.to_vec()[..256], pattern(256, 9)[..]);
    let before = target.to_vec();

    b.invalidate_window(&mut w, WAIT).unwrap();
    assert!(!w.is_bound());
    assert!(
        w.remote().is_err(),
        "no descriptor of an invalidated window"
    );
    let other = a
        .registry()
        .register_buffer(vec![0x5a; 256], RegisterOptions::local())
        .unwrap();
    let err = a.write(&[Gather::of(&other).unwrap()], desc).unwrap_err();
    assert_eq!(class(&err), WcClass::RemoteAccess, "{err}");
    assert_eq!(target.to_vec(), before, "the stale write touched nothing");
    // Invalidating again does nothing.
    b.invalidate_window(&mut w, WAIT).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn no_window_grants_what_the_registration_does_not() {
    let (_a, b) = pair();
    // Local memory (remote read only): no window may make it writable,
    // which the device itself would allow (a window's remote write needs
    // only LOCAL_WRITE on the region).
    let local = b
        .registry()
        .register_buffer(
            vec![0u8; 4096],
            RegisterOptions::local()
                .allow_remote_read()
                .allow_memory_windows(),
        )
        .unwrap();
    for rights in [AccessFlags::REMOTE_WRITE, AccessFlags::REMOTE_ATOMIC] {
        let err = b
            .bind_window(0, local.registration(), 0..4096, rights, WAIT)
            .unwrap_err();
        assert!(
            matches!(
                err,
                TransportError::Memory(MrError::AccessNotGranted {
                    what: "a memory window",
                    ..
                })
            ),
            "{err}"
        );
    }
    // Without MW_BIND, no window at all; outside the registration, none.
    let plain = b
        .registry()
        .register_buffer(
            vec![0u8; 4096],
            RegisterOptions::local().allow_remote_read(),
        )
        .unwrap();
    let err = b
        .bind_window(
            0,
            plain.registration(),
            0..64,
            AccessFlags::REMOTE_READ,
            WAIT,
        )
        .unwrap_err();
    assert!(err.to_string().contains("MW_BIND"), "{err}");
    let err = b
        .bind_window(
            0,
            local.registration(),
            4000..5000,
            AccessFlags::REMOTE_READ,
            WAIT,
        )
        .unwrap_err();
    assert!(
        matches!(err, TransportError::Memory(MrError::OutOfRange { .. })),
        "{err}"
    );
    // A window still held keeps shared memory from turning local.
    let shared = b
        .registry()
        .alloc(
            4096,
            RegisterOptions::local()
                .allow_remote_write()
                .allow_memory_windows(),
        )
        .unwrap();
    let reg = shared.registration().clone();
    let w = b
        .bind_window(0, &reg, 0..4096, AccessFlags::REMOTE_WRITE, WAIT)
        .unwrap();
    drop(reg);
    let shared = match shared.into_local(RegisterOptions::local()) {
        Err(e) => {
            assert!(
                matches!(e.error(), MrError::StillShared { .. }),
                "{:?}",
                e.error()
            );
            e.into_buffer()
        }
        Ok(_) => panic!("a window's registration turned local while the window lived"),
    };
    drop(w);
    let local = shared
        .into_local(RegisterOptions::local())
        .unwrap_or_else(|e| panic!("{:?}", e.error()));
    assert_eq!(local.len(), 4096);
}
