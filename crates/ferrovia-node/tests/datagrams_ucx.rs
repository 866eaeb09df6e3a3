//! Datagrams between the ranks of a UCX job, ranks as threads of this
//! process: many to one, named and whole, the limit typed, a cut message
//! reported. (UCX's connections are reliable: nothing is lost here.)
#![cfg(feature = "ucx")]

mod datagrams_common;

use ferrovia_node::Backend;

#[test]
fn three_ranks_send_datagrams_to_one_over_ucx() {
    let max = datagrams_common::many_to_one(Backend::Ucx, 4, 40);
    assert_eq!(max, 4096, "UCX takes the configured limit");
}
