//! UCX groundwork on the host: a context and workers over tcp.

use ferrovia_ucx::{UcxContext, UcxError, Worker};

#[test]
fn a_context_and_workers_with_addresses() {
    let ctx = UcxContext::with_options(&[("TLS", "tcp")]).expect("ucp_init over tcp");
    let a = Worker::new(&ctx).unwrap();
    let b = Worker::new(&ctx).unwrap();
    let (aa, ba) = (a.address().unwrap(), b.address().unwrap());
    assert!(!aa.is_empty() && !ba.is_empty());
    assert_ne!(aa, ba, "two workers share an address");
    a.progress();
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
