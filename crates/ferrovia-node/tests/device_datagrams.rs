//! Datagrams between the ranks of a verbs job (UD queue pairs on
//! soft-RoCE), ranks as threads of this process: many to one, named and
//! whole, the limit (the port's MTU) typed, a cut message reported. Run
//! by `cargo xtask test`.

mod datagrams_common;

use ferrovia_node::Backend;

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn three_ranks_send_datagrams_to_one_over_verbs() {
    let max = datagrams_common::many_to_one(Backend::Verbs, 4, 40);
    assert!(max <= 4096, "the path MTU bounds a datagram: {max}");
}
