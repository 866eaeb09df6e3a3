//! Registrations whose RDMA addresses are not their pointers (zero-based,
//! or rebased to a chosen base) as local buffers over UCX: writes and
//! sends from them, reads and receives into them, land where they should.
//! UCX was handed the RDMA address as a pointer: from safe code, the
//! first write from a zero-based segment over shared memory died in
//! `uct_sm_ep_put_short` (SIGSEGV at 0x30000, the buffer's offset), and
//! over tcp the bytes that went were whatever that address held.

mod common;

use common::*;
use ferrovia_channel::{
    PeerReceiveWorkRequest, PeerSendWorkRequest, ReceiveWorkRequest, Scatter, SendWorkRequest,
};
use ferrovia_mr::RegisterOptions;

fn rebased_buffers_move_the_right_bytes(tls: &str) {
    let mut w = world_on(2, tls, ferrovia_ucx::UcxTransport::builder);
    let (mut b, _tb) = w.pop().expect("rank 1");
    let (mut a, _ta) = w.pop().expect("rank 0");
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    for opts in [
        RegisterOptions::local().zero_based(),
        RegisterOptions::local().rdma_base(0x7700_0000),
    ] {
        // Page-aligned (a rebased registration starts on a page).
        let mut src = a.registry().alloc(8192, opts).unwrap();
        src.copy_from_slice(&pattern);
        assert_ne!(
            src.registration().view().rdma_addr,
            src.registration().view().virtual_addr,
            "a rebased registration"
        );
        let target = b.registry().alloc(8192, rw().zero_based()).unwrap();
        let remote = target.registration().remote().unwrap();
        assert_eq!(write(&mut a, &src, remote), Ok(()));
        assert_eq!(target.to_vec(), pattern, "written from a rebased source");
        let mut back = a.registry().alloc(8192, opts).unwrap();
        assert_eq!(read(&mut a, &mut back, remote), Ok(()));
        assert_eq!(&back[..], &pattern[..], "read into a rebased buffer");
        // A send from a rebased buffer into a rebased receive.
        let mut inbox = b.registry().alloc(8192, opts).unwrap();
        b.scope(|rx| {
            let r = rx.post_receive(PeerReceiveWorkRequest::new(
                0,
                ReceiveWorkRequest::new(Scatter::of(&mut inbox)?),
            ))?;
            a.scope(|tx| {
                let g = [ferrovia_channel::Gather::of(&src)?];
                tx.post_send(PeerSendWorkRequest::new(1, SendWorkRequest::new(&g)?))?
                    .wait(WAIT)
            })
            .expect("the send");
            r.wait(WAIT)
        })
        .unwrap();
        assert_eq!(&inbox[..], &pattern[..], "sent between rebased buffers");
    }
}

#[test]
fn rebased_buffers_over_tcp() {
    rebased_buffers_move_the_right_bytes("tcp");
}

#[test]
fn rebased_buffers_over_shared_memory() {
    rebased_buffers_move_the_right_bytes(SHARED_MEMORY);
}
