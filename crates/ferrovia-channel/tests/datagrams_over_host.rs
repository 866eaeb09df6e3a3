//! Datagrams over a channel's shared receive pool, on the host through a
//! pool double: called directly (not through `Datagrams`, which checks
//! first), a datagram over the limit is a typed error, not a panic, and a
//! failed receive is reported without handing anything over as data.

use std::time::Duration;

use ferrovia_channel::transport::SharedFlush;
use ferrovia_channel::{
    ChannelConfig, ChannelDatagrams, DatagramTransport, MultiChannel, TransportError,
};
use ferrovia_testkit::PoolDouble;
use ferrovia_types::WcStatus;

const WAIT: Duration = Duration::from_millis(200);

fn datagrams(double: &std::sync::Arc<PoolDouble>, max: usize) -> ChannelDatagrams {
    let mut cfg = ChannelConfig::default();
    cfg.drain_deadline = Duration::from_millis(50);
    cfg.op_timeout = Duration::from_millis(100);
    let multi = MultiChannel::over(double.clone(), ferrovia_testkit::registry(), cfg);
    ChannelDatagrams::new(multi, max).unwrap()
}

#[test]
fn a_datagram_over_the_limit_is_refused_by_name() {
    let double = PoolDouble::new(2, 4, SharedFlush::Reported);
    let mut d = datagrams(&double, 64);
    let e = d.send_to(1, &[5u8; 65], WAIT).unwrap_err();
    assert!(
        matches!(e, TransportError::DatagramTooLong { len: 65, max: 64 }),
        "{e:?}"
    );
    d.send_to(1, &[5u8; 64], WAIT).unwrap();
}

#[test]
fn a_failed_receive_is_an_error_and_the_next_one_arrives() {
    let double = PoolDouble::new(2, 4, SharedFlush::Reported);
    let mut d = datagrams(&double, 64);
    assert!(double.deliver(1, 64, WcStatus::LOC_LEN_ERR));
    let mut out = [9u8; 64];
    assert!(d.recv_into(&mut out, WAIT).is_err());
    assert_eq!(out, [9u8; 64], "nothing of a failed receive is copied out");
    assert!(double.deliver(1, 10, WcStatus::SUCCESS));
    let got = d.recv_into(&mut out, WAIT).unwrap().expect("a datagram");
    assert_eq!((got.from(), got.len()), (1, 10));
}
