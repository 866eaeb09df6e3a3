//! Host tests: what must hold on a machine with or without RDMA devices.

use ferrovia_verbs::{Context, VerbsError, devices};

#[test]
fn listing_devices_never_fails_for_lack_of_rdma() {
    // On a kernel without RDMA, ibv_get_device_list gives NULL + ENOSYS:
    // that is an empty list, not an error.
    let list = devices().expect("devices() must not fail on a host without RDMA");
    for d in &list {
        assert!(!d.name.is_empty());
    }
}

#[test]
fn opening_an_unknown_device_is_a_typed_error() {
    match Context::open("no-such-device-ferrovia") {
        Err(VerbsError::NoDevice) => assert!(devices().unwrap().is_empty()),
        Err(VerbsError::NoSuchDevice { name, present }) => {
            assert_eq!(name, "no-such-device-ferrovia");
            assert!(!present.is_empty());
        }
        other => panic!("expected a typed no-device error, got {other:?}"),
    }
}

#[cfg(feature = "cm")]
#[test]
fn connecting_by_address_without_rdma_is_a_typed_error_naming_the_address() {
    use std::time::{Duration, Instant};

    use ferrovia_verbs::cm::{CmError, CmListener, cm_connect};

    if !devices().unwrap().is_empty() {
        return; // a host with RDMA: the device tests cover the rest
    }
    let addr = "127.0.0.1:7471".parse().unwrap();
    let e = CmListener::bind(addr).unwrap_err();
    assert_eq!(e.addr(), Some(addr), "{e:?}");
    assert!(
        matches!(e, CmError::Call { .. } | CmError::Unavailable(_)),
        "{e:?}"
    );
    let started = Instant::now();
    let e = cm_connect(addr, b"hello", Duration::from_secs(2)).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3), "{e}");
    assert!(e.to_string().contains("127.0.0.1:7471"), "{e}");
    eprintln!("without RDMA: {e}");
}
