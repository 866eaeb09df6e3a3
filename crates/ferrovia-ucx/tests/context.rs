//! UCX contexts and transports on the host (tcp), no device needed.

use ferrovia_ucx::{UcxContext, UcxError, UcxTransport};

#[test]
fn transports_have_distinct_addresses() {
    let ctx = UcxContext::with_options(&[("TLS", "tcp")]).expect("ucp_init over tcp");
    let a = UcxTransport::new(&ctx).unwrap();
    let b = UcxTransport::new(&ctx).unwrap();
    assert!(!a.address().is_empty() && !b.address().is_empty());
    assert_ne!(a.address(), b.address(), "two workers share an address");
}

#[test]
fn bad_options_are_typed_errors() {
    assert!(matches!(
        UcxContext::with_options(&[("TLS", "a\0b")]),
        Err(UcxError::InvalidOption { .. })
    ));
    match UcxContext::with_options(&[("RNDV_THRESH", "not-a-size")]) {
        Err(UcxError::Status { op, .. }) => assert_eq!(op, "ucp_config_modify"),
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("a malformed value was accepted"),
    }
}

#[test]
fn connect_checks_its_arguments() {
    let ctx = UcxContext::with_options(&[("TLS", "tcp")]).unwrap();
    let t = UcxTransport::new(&ctx).unwrap();
    let me = t.address().to_vec();
    assert!(matches!(
        t.connect(1, std::slice::from_ref(&me)),
        Err(UcxError::BadPeers { me: 1, peers: 1 })
    ));
    t.connect(0, std::slice::from_ref(&me)).unwrap();
    assert!(matches!(
        t.connect(0, &[me]),
        Err(UcxError::AlreadyConnected)
    ));
}
