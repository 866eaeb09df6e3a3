//! Rails of a verbs node of one rank, in this process: a device that does
//! not exist and a UCX spec are typed errors naming them; a rail on the
//! node's device has a protection domain of its own and carries data.

mod rails_common;

use std::time::Duration;

use ferrovia_node::{Backend, NodeError, RailError, RailSpec};
use rails_common::{loopback, node};

const T: Duration = Duration::from_secs(20);

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_missing_device_is_a_typed_error_naming_it() {
    let mut node = node(Backend::Verbs);
    let e = node
        .open_rail(0, RailSpec::Device("no-such-device".into()), T)
        .unwrap_err();
    assert!(
        matches!(
            &e,
            NodeError::Rail(RailError::NoSuchDevice { rail: 0, device, .. })
                if device == "no-such-device"
        ),
        "{e}"
    );
    assert!(e.to_string().contains("\"no-such-device\""), "{e}");
    let e = node.open_rail(0, RailSpec::Worker, T).unwrap_err();
    assert!(
        matches!(
            e,
            NodeError::Rail(RailError::NoWorkers {
                rail: 0,
                backend: Backend::Verbs
            })
        ),
        "{e}"
    );
    let rail = node.open_rail(0, RailSpec::Same, T).unwrap();
    assert!(rail.describe().starts_with("verbs on "), "{rail:?}");
    loopback(&rail, 3).unwrap();
    // A second device when the VM has one (FERROVIA_RAIL1_DEVICE).
    if let Ok(device) = std::env::var("FERROVIA_RAIL1_DEVICE") {
        let rail = node
            .open_rail(1, RailSpec::Device(device.clone()), T)
            .unwrap();
        assert_eq!(rail.describe(), format!("verbs on {device}"));
        loopback(&rail, 4).unwrap();
    }
}
