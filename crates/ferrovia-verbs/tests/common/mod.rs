//! Shared set-up of the device tests: two RC QPs on one device, connected
//! to each other, and registered buffers.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use ferrovia_verbs::{
    AccessFlags, CompletionQueue, ConnectOptions, Context, CqOptions, MemoryRegion, PollPath,
    PostPath, ProtectionDomain, QpCaps, QueuePair, WorkCompletion,
};

/// Generous: everything runs under TCG emulation in the VM.
pub const WAIT: Duration = Duration::from_secs(20);

/// Opens the test device; a device test that finds none fails.
pub fn device() -> Context {
    Context::open_default()
        .unwrap_or_else(|e| panic!("device test found no usable RDMA device: {e}"))
}

/// The test device's IPv4 address (its IPv4-mapped GID), for tests that
/// connect by address.
pub fn ipv4() -> std::net::IpAddr {
    let ctx = device();
    let port = ctx.active_port().expect("an active port").port;
    let gid = ctx
        .gid_table(port)
        .expect("the GID table")
        .into_iter()
        .find(|g| g.gid.is_ipv4_mapped())
        .expect("the device has an IPv4 address (an IPv4-mapped GID)");
    std::net::IpAddr::V6(gid.gid.0.into()).to_canonical()
}

/// A heap buffer with its registration. Field order: the MR is
/// deregistered before the buffer is freed.
pub struct Buf {
    pub mr: MemoryRegion,
    pub data: Vec<u8>,
}

impl Buf {
    pub fn new(pd: &ProtectionDomain, len: usize, access: AccessFlags) -> Buf {
        let mut data = vec![0u8; len];
        // SAFETY: `data` is heap memory owned by the same struct as the MR
        // and dropped after it; the tests only touch it between completions.
        let mr = unsafe { MemoryRegion::register(pd, data.as_mut_ptr(), len, access) }
            .expect("ibv_reg_mr");
        Buf { mr, data }
    }

    pub fn addr(&self) -> u64 {
        self.data.as_ptr() as u64
    }

    pub fn sge(&self, offset: usize, len: usize) -> ferrovia_verbs::Sge {
        ferrovia_verbs::Sge::new(self.addr() + offset as u64, len as u32, self.mr.lkey())
    }
}

/// Two connected QPs `a` and `b` on the same device, each with its own CQ.
pub struct Pair {
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub cq_a: CompletionQueue,
    pub cq_b: CompletionQueue,
    pub a: QueuePair,
    pub b: QueuePair,
}

impl Pair {
    pub fn new() -> Pair {
        Self::with_options(&ConnectOptions::default())
    }

    pub fn with_options(opts: &ConnectOptions) -> Pair {
        Self::build(opts, PostPath::Auto, PollPath::Auto)
    }

    /// A pair whose QPs post through `post` and whose CQs poll through
    /// `poll`.
    pub fn with_paths(post: PostPath, poll: PollPath) -> Pair {
        Self::build(&ConnectOptions::default(), post, poll)
    }

    fn build(opts: &ConnectOptions, post: PostPath, poll: PollPath) -> Pair {
        let ctx = device();
        let pd = ProtectionDomain::new(&ctx).expect("ibv_alloc_pd");
        let cq_opts = CqOptions::default().channel(true).poll_path(poll);
        let cq_a = CompletionQueue::with_options(&ctx, 512, &cq_opts).expect("create cq a");
        let cq_b = CompletionQueue::with_options(&ctx, 512, &cq_opts).expect("create cq b");
        let caps = QpCaps::default();
        let a = QueuePair::builder(&pd, &cq_a, &cq_a)
            .caps(caps)
            .post_path(post)
            .build()
            .expect("create qp a");
        let b = QueuePair::builder(&pd, &cq_b, &cq_b)
            .caps(caps)
            .post_path(post)
            .build()
            .expect("create qp b");
        a.connect(&b.endpoint(), opts).expect("connect a to b");
        b.connect(&a.endpoint(), opts).expect("connect b to a");
        Pair {
            ctx,
            pd,
            cq_a,
            cq_b,
            a,
            b,
        }
    }
}

/// Waits for exactly one completion on `cq`.
pub fn one(cq: &CompletionQueue) -> WorkCompletion {
    let mut wc = [WorkCompletion::default()];
    let n = cq.wait(&mut wc, WAIT).expect("waiting for a completion");
    assert_eq!(n, 1);
    wc[0]
}

/// Waits for one completion and asserts success and its wr_id.
pub fn ok(cq: &CompletionQueue, wr_id: u64) -> WorkCompletion {
    let wc = one(cq);
    if let Err(e) = wc.result() {
        panic!("expected wr {wr_id} to succeed: {e}");
    }
    assert_eq!(wc.wr_id(), wr_id);
    wc
}

/// Deterministic bytes for a transfer, different per seed.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

pub const SIZES: [usize; 7] = [1, 7, 64, 1000, 4096, 65536, 1 << 20];

/// The device's live objects as the kernel counts them (`rdma res show`:
/// pd, cq, qp, mr, srq, ...), to show that a refusal left nothing behind.
/// Device tests run one at a time (`--test-threads=1`), so the counts
/// move only with the test's own objects.
pub fn resources(device: &str) -> std::collections::BTreeMap<String, u64> {
    let out = std::process::Command::new("rdma")
        .args(["res", "show"])
        .output()
        .expect("running `rdma res show` (iproute2)");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(&format!("{device}:")))
        .unwrap_or_else(|| panic!("`rdma res show` has no line for {device}: {text}"));
    let words: Vec<&str> = line.split_whitespace().skip(2).collect();
    words
        .chunks(2)
        .filter_map(|kv| Some((kv[0].to_owned(), kv.get(1)?.parse().ok()?)))
        .collect()
}
