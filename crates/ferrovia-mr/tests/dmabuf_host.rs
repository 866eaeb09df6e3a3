//! The registry's bookkeeping of device memory (dma-buf registrations),
//! with a registrar double: the seed's view of a large zero-based segment
//! (a caching allocator's), no slice of device memory, typed refusals.

use std::fs::File;
use std::os::fd::AsFd;

use ferrovia_mr::{MrError, MrRegistry, RegisterOptions};
use ferrovia_testkit::{FakeRegistrar, NoDevice};

const GIB16: usize = 16 << 30;

#[test]
fn a_zero_based_segment_gives_views_at_offsets_as_in_the_seed() {
    let fake = FakeRegistrar::default();
    let live = fake.live.clone();
    let registry = MrRegistry::with_registrar(fake);
    let fd = File::open("/dev/null").unwrap();
    // A 16 GiB segment at device address 0x0100_0000, registered at RDMA
    // address 0 (the seed's example).
    let reg = registry
        .register_dmabuf(
            fd.as_fd(),
            0,
            GIB16,
            0x0100_0000,
            RegisterOptions::local().allow_remote_read().zero_based(),
        )
        .unwrap();
    assert!(reg.is_device_memory());
    assert_eq!((reg.addr(), reg.rdma_base()), (0x0100_0000, 0));
    let v = registry.view(0x0110_0000, 4096).unwrap();
    assert_eq!(
        (v.virtual_addr, v.rdma_addr, v.size),
        (0x0110_0000, 0x10_0000, 4096)
    );
    assert_eq!(v.id, reg.id());
    let d = v.remote().unwrap();
    assert_eq!((d.addr(), d.len()), (0x10_0000, 4096));
    // Nothing past the segment.
    assert!(registry.view(0x0100_0000 + GIB16 - 8, 16).is_err());
    // Registered at its device address instead.
    let at = registry
        .register_dmabuf(
            fd.as_fd(),
            4096,
            8192,
            0x7000_0000_0000,
            RegisterOptions::local(),
        )
        .unwrap();
    assert_eq!(at.rdma_base(), 0x7000_0000_0000);
    assert_eq!(
        registry.view(0x7000_0000_1000, 16).unwrap().rdma_addr,
        0x7000_0000_1000
    );
    drop((reg, at));
    assert_eq!(live.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[test]
fn device_memory_is_never_a_slice_and_refusals_are_typed() {
    let registry = MrRegistry::with_registrar(FakeRegistrar::default());
    let fd = File::open("/dev/null").unwrap();
    let reg = registry
        .register_dmabuf(fd.as_fd(), 0, 4096, 0x1000, RegisterOptions::local())
        .unwrap();
    // Bytes of this process are not device memory, even at its address.
    let host = vec![0u8; 16];
    assert!(matches!(
        reg.view_of(&host),
        Err(MrError::DeviceMemory { .. })
    ));
    // An RDMA base whose offset in a page differs from the dma-buf's.
    let e = registry
        .register_dmabuf(
            fd.as_fd(),
            100,
            4096,
            0x1000,
            RegisterOptions::local().rdma_base(0),
        )
        .unwrap_err();
    assert!(matches!(e, MrError::MisalignedRdmaBase { .. }), "{e}");
    assert!(matches!(
        registry.register_dmabuf(fd.as_fd(), 0, 0, 0x1000, RegisterOptions::local()),
        Err(MrError::ZeroLength { .. })
    ));
    // A backend that does not offer it says so.
    let plain = MrRegistry::with_registrar(NoDevice);
    let e = plain
        .register_dmabuf(fd.as_fd(), 0, 4096, 0x1000, RegisterOptions::local())
        .unwrap_err();
    assert!(
        matches!(
            e,
            MrError::NotOffered {
                what: "dma-buf registration"
            }
        ),
        "{e}"
    );
    assert_eq!(plain.stats().live_registrations, 0);
}
