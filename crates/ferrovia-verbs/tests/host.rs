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
