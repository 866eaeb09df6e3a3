//! Rails of a UCX node of one rank, in this process: the typed errors of
//! a spec the backend cannot open and of ids and links out of range, and a
//! rail's loopback connection carrying data, reconnected on its own link.
#![cfg(feature = "ucx")]

mod rails_common;

use std::cell::RefCell;
use std::time::{Duration, Instant};

use ferrovia_node::{Backend, BootstrapError, NodeError, RailError, RailSpec};
use rails_common::{loopback, node};

const T: Duration = Duration::from_secs(20);

#[test]
fn a_ucx_node_has_no_devices_to_name_and_opens_a_worker_after() {
    let mut node = node(Backend::Ucx);
    let started = Instant::now();
    let e = node
        .open_rail(0, RailSpec::Device("rxe1".into()), T)
        .unwrap_err();
    assert!(
        matches!(
            &e,
            NodeError::Rail(RailError::NoDevices { rail: 0, backend: Backend::Ucx, device })
                if device == "rxe1"
        ),
        "{e}"
    );
    assert!(e.to_string().contains("no devices"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let e = node.open_rail(u32::MAX, RailSpec::Same, T).unwrap_err();
    assert!(
        matches!(e, NodeError::Rail(RailError::InvalidId { id: u32::MAX })),
        "{e}"
    );
    let rail = node.open_rail(0, RailSpec::Worker, T).unwrap();
    assert_eq!((rail.id(), rail.link()), (0, 1));
    assert!(rail.describe().starts_with("ucx worker 0"), "{rail:?}");
    loopback(&rail, 7).unwrap();
}

#[test]
fn a_rail_reconnects_on_its_own_link_and_link_0_is_refused() {
    let mut node = node(Backend::Ucx);
    let rails: Vec<_> = (0..2)
        .map(|id| node.open_rail(id, RailSpec::Same, T).unwrap())
        .collect();
    let mut channels: Vec<_> = rails
        .iter()
        .enumerate()
        .map(|(i, r)| loopback(r, i as u8).unwrap())
        .collect();
    let e = node
        .reconnect_with(0, 0, T, || Ok(Vec::new()), |_| Ok(()))
        .unwrap_err();
    assert!(
        matches!(
            &e,
            NodeError::Reconnect { link: 0, source, .. }
                if matches!(**source, NodeError::Bootstrap(BootstrapError::ReservedLink))
        ),
        "{e}"
    );
    let link = rails[1].link();
    let ch = RefCell::new(&mut channels[1]);
    node.reconnect_with(
        link,
        0,
        T,
        || Ok(ch.borrow_mut().renew(0)?),
        |theirs| Ok(ch.borrow_mut().connect_renewed(0, &theirs)?),
    )
    .unwrap();
    assert_eq!(node.link_generation(link, 0), Some(1));
    assert_eq!(node.link_generation(rails[0].link(), 0), Some(0));
    assert_eq!(node.connection_generation(0), Some(0));
    assert_eq!(node.link_generation(link, 1), None);
    // Both rails still carry data; a rail opened again starts anew.
    drop(channels);
    loopback(&rails[1], 9).unwrap();
    loopback(&rails[0], 8).unwrap();
    drop(rails);
    let again = node.open_rail(1, RailSpec::Worker, T).unwrap();
    assert_eq!(node.link_generation(again.link(), 0), Some(0));
    loopback(&again, 10).unwrap();
}
