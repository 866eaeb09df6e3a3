//! Device tests of what soft-RoCE refuses: dma-buf registration (its
//! provider has no `ibv_reg_dmabuf_mr`) of a real host-memory dma-buf
//! (`udmabuf`, else `vgem`), and on-demand paging (Debian 12's rxe has no
//! ODP) with its prefetch: each a typed refusal naming the device and the
//! capability or errno, at the verbs layer and through the registry, and
//! nothing left behind. Run by `cargo xtask test`.

use std::collections::BTreeMap;

use ferrovia_mr::{MrError, RegisterOptions};
use ferrovia_testkit::HostDmaBuf;
use ferrovia_verbs::{AccessFlags, Context, MemoryRegion, ProtectionDomain, VerbsError};
use ferrovia_verbs_transport::registry;

fn device() -> Context {
    Context::open_default().unwrap_or_else(|e| panic!("device test found no RDMA device: {e}"))
}

/// `rdma res show`'s counts for `device` (device tests run one at a time).
fn resources(device: &str) -> BTreeMap<String, u64> {
    let out = std::process::Command::new("rdma")
        .args(["res", "show"])
        .output()
        .expect("rdma res show");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(&format!("{device}:")))
        .unwrap_or_else(|| panic!("no line for {device}: {text}"));
    let w: Vec<&str> = line.split_whitespace().skip(2).collect();
    w.chunks(2)
        .filter_map(|kv| Some((kv[0].to_owned(), kv.get(1)?.parse().ok()?)))
        .collect()
}

fn unsupported(e: &VerbsError) -> (&str, &'static str, &str) {
    match e {
        VerbsError::Unsupported {
            device,
            what,
            detail,
        } => (device, what, detail),
        other => panic!("expected a typed refusal, got {other}"),
    }
}

/// The verbs error inside a registry error.
fn inner(e: &MrError) -> &VerbsError {
    match e {
        MrError::Registrar(inner) => inner.downcast_ref().expect("a VerbsError"),
        other => panic!("expected the registrar's error, got {other}"),
    }
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn soft_roce_refuses_a_dmabuf_by_name_and_registers_nothing() {
    let ctx = device();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let buf = HostDmaBuf::new(1 << 20).unwrap_or_else(|e| panic!("{e}"));
    let before = resources(ctx.name());
    for iova in [0, 0x7f00_0000_0000] {
        let e = MemoryRegion::register_dmabuf(
            &pd,
            buf.fd(),
            4096,
            65536,
            iova,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap_err();
        let (device, what, detail) = unsupported(&e);
        assert_eq!((device, what), (ctx.name(), "dma-buf registration"), "{e}");
        assert!(
            detail.contains("ibv_reg_dmabuf_mr") && detail.contains("95"),
            "{detail}"
        );
    }
    // Through the registry: the same refusal inside, nothing registered.
    let reg = registry(&pd);
    let e = reg
        .register_dmabuf(
            buf.fd(),
            0,
            65536,
            0x0100_0000,
            RegisterOptions::local().zero_based(),
        )
        .unwrap_err();
    assert_eq!(unsupported(inner(&e)).1, "dma-buf registration");
    assert_eq!(reg.stats().live_registrations, 0);
    assert_eq!(resources(ctx.name()), before, "the refusals left nothing");
    eprintln!("dma-buf from {} refused as expected", buf.source());
}

#[test]
#[ignore = "needs an RDMA device: cargo xtask test"]
fn soft_roce_refuses_on_demand_paging_by_name_and_registers_nothing() {
    let ctx = device();
    let caps = ctx.query_device_ex().unwrap();
    assert!(!caps.odp.supported, "Debian 12's rxe has no ODP: {caps:?}");
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let before = resources(ctx.name());
    let mut mem = vec![0u8; 65536];
    // SAFETY: a refused registration never names the memory; had it been
    // accepted, `mem` outlives it (dropped at the end of the test).
    let e = unsafe {
        MemoryRegion::register(
            &pd,
            mem.as_mut_ptr(),
            mem.len(),
            AccessFlags::LOCAL_WRITE | AccessFlags::ON_DEMAND,
        )
    }
    .unwrap_err();
    let (device, what, detail) = unsupported(&e);
    assert_eq!((device, what), (ctx.name(), "on-demand paging"), "{e}");
    assert!(detail.contains("IBV_ODP_SUPPORT"), "{detail}");
    // Through the registry, with the option.
    let reg = registry(&pd);
    let e = reg
        .register_buffer(vec![0u8; 4096], RegisterOptions::local().on_demand())
        .unwrap_err();
    assert_eq!(unsupported(inner(&e)).1, "on-demand paging");
    assert_eq!(reg.stats().live_registrations, 0);
    assert_eq!(resources(ctx.name()), before, "the refusals left nothing");
    // A prefetch on a plain region: the device has no ODP, said by name.
    // SAFETY: `mem` outlives the region (dropped after it).
    let mr =
        unsafe { MemoryRegion::register(&pd, mem.as_mut_ptr(), 4096, AccessFlags::LOCAL_WRITE) }
            .unwrap();
    let e = mr.prefetch(mr.addr() as u64, 4096, true).unwrap_err();
    assert_eq!(unsupported(&e).1, "on-demand paging");
    drop(mr);
    drop(mem);
}
