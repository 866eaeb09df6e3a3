//! The dma-buf data path over UCX: a real host-memory dma-buf (`udmabuf`,
//! else `vgem`, which needs the kernel module: run in the VM by `cargo
//! xtask test`), mapped and registered by the UCX registrar, zero-based as
//! a caching allocator's segment; a peer writes into it and reads it
//! through its descriptor, and its owner sends from it by range
//! (`Gather::device`), over tcp.

mod common;

use common::{WAIT, world};
use ferrovia_channel::{
    Gather, PeerReadWorkRequest, PeerWriteWorkRequest, ReadWorkRequest, Scatter, WriteWorkRequest,
};
use ferrovia_mr::RegisterOptions;
use ferrovia_testkit::HostDmaBuf;

#[test]
// Not an RDMA device but the VM's vgem (or a host's udmabuf): a device test.
#[ignore = "needs an RDMA device: cargo xtask test"]
fn a_host_dmabuf_carries_writes_and_reads_over_ucx() {
    let buf = HostDmaBuf::new(1 << 20).unwrap_or_else(|e| panic!("{e}"));
    let mut w = world(2);
    let (mut b, _) = w.pop().unwrap();
    let (mut a, _) = w.pop().unwrap();
    // A registers 64 KiB of the dma-buf from byte 8192, zero-based, as the
    // segment at device address 0x0100_0000.
    let seg = a
        .registry()
        .register_dmabuf(
            buf.fd(),
            8192,
            65536,
            0x0100_0000,
            RegisterOptions::local()
                .allow_remote_read()
                .allow_remote_write()
                .zero_based(),
        )
        .unwrap();
    assert!(seg.is_device_memory());
    // The view of a tensor inside the segment, by its device address.
    let view = a.registry().view(0x0100_1000, 4096).unwrap();
    assert_eq!(view.rdma_addr, 0x1000);
    let remote = view.remote().unwrap();

    // B writes a pattern into it...
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let src = common::buf(&b, &pattern, RegisterOptions::local());
    b.scope(|s| {
        let g = [Gather::of(&src)?];
        s.post_write(PeerWriteWorkRequest::new(
            0,
            WriteWorkRequest::new(&g, remote)?,
        ))?
        .wait(WAIT)
    })
    .unwrap();
    assert_eq!(
        buf.read(8192 + 0x1000, 4096),
        pattern,
        "the dma-buf's bytes"
    );
    // ...and reads it back.
    let mut back = b.registry().alloc(4096, RegisterOptions::local()).unwrap();
    b.scope(|s| {
        s.post_read(PeerReadWorkRequest::new(
            0,
            ReadWorkRequest::new(Scatter::of(&mut back)?, remote)?,
        ))?
        .wait(WAIT)
    })
    .unwrap();
    assert_eq!(&back[..], &pattern[..]);

    // A sends from the dma-buf by range: a write into B's memory.
    buf.write(8192 + 0x2000, &[0x5a; 512]);
    let target = b.registry().alloc(512, common::rw()).unwrap();
    let at = target.registration().remote().unwrap();
    a.scope(|s| {
        let g = [Gather::device(&seg, 0x2000..0x2000 + 512)?];
        s.post_write(PeerWriteWorkRequest::new(1, WriteWorkRequest::new(&g, at)?))?
            .wait(WAIT)
    })
    .unwrap();
    assert_eq!(target.to_vec(), vec![0x5a; 512]);
    drop(seg);
    eprintln!("dma-buf from {}", buf.source());
}
