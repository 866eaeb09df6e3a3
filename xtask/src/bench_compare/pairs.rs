//! The pairs `cargo xtask bench --compare` runs: each `ferrovia-perf`
//! test next to the reference tool's test, with the flags both get.

use super::plan::{Kind, SIZES};

/// A `ferrovia-perf` test and the reference test it is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pair {
    /// What the tables and the results file call it (unique per
    /// transport, one word): the test, and `:` what its flags pick.
    pub(crate) name: &'static str,
    /// `ferrovia-perf TEST`.
    pub(crate) test: &'static str,
    /// The perftest program, or the `ucx_perftest -t` test.
    pub(crate) reference: &'static str,
    pub(crate) kind: Kind,
    /// Flags for `ferrovia-perf`.
    pub(crate) ours: &'static [&'static str],
    /// Flags for the reference.
    pub(crate) theirs: &'static [&'static str],
    /// The sizes it runs at ([`SIZES`] for most).
    pub(crate) sizes: &'static [usize],
    /// Whether the reference takes `-s` (perftest's atomic tests do not:
    /// their size is 8).
    pub(crate) sized: bool,
    /// Requests per post list (`-l`): perftest wants iterations that are
    /// a multiple of it.
    pub(crate) list: usize,
    /// The reference is `ferrovia-perf` itself on the scoped path (with
    /// `theirs`), and ours its `--async` path: issue 18's ratios.
    pub(crate) scoped_reference: bool,
}

const fn pair(test: &'static str, reference: &'static str, kind: Kind) -> Pair {
    Pair {
        name: test,
        test,
        reference,
        kind,
        ours: &[],
        theirs: &[],
        sizes: &SIZES,
        sized: true,
        list: 1,
        scoped_reference: false,
    }
}

/// `test` through ferrovia-async with `mode` (`--async`: futures woken by
/// the transport's event fd; `--async-busy`: busy polling) next to the
/// same test on the scoped path, at `sizes`.
const fn async_path(
    name: &'static str,
    test: &'static str,
    kind: Kind,
    mode: &'static [&'static str],
    sizes: &'static [usize],
) -> Pair {
    Pair {
        name,
        ours: mode,
        sizes,
        scoped_reference: true,
        ..pair(test, SCOPED, kind)
    }
}

/// The reference's name in the async pairs.
pub(crate) const SCOPED: &str = "ferrovia-perf (scoped)";
/// Latency of the async path is compared at 8 B, bandwidth from 4 KiB
/// (issue 18's goals).
const ASYNC_LAT_SIZES: &[usize] = &[8];
const ASYNC_BW_SIZES: &[usize] = &[4 << 10, 64 << 10, 1 << 20];

const SLEEPING: &[&str] = &["--async"];
const BUSY: &[&str] = &["--async-busy"];

/// The async path next to the scoped path, on every transport. The
/// scoped latency tests spin, so the like-for-like latency is the busy
/// polling one; `send_lat:async` prices sleeping in the kernel.
const ASYNC_PAIRS: [Pair; 5] = [
    async_path(
        "send_lat:async-busy",
        "send_lat",
        Kind::Latency,
        BUSY,
        ASYNC_LAT_SIZES,
    ),
    async_path(
        "write_lat:async-busy",
        "write_lat",
        Kind::Latency,
        BUSY,
        ASYNC_LAT_SIZES,
    ),
    async_path(
        "send_lat:async",
        "send_lat",
        Kind::Latency,
        SLEEPING,
        ASYNC_LAT_SIZES,
    ),
    async_path(
        "write_bw:async",
        "write_bw",
        Kind::Bandwidth,
        SLEEPING,
        ASYNC_BW_SIZES,
    ),
    async_path(
        "send_bw:async",
        "send_bw",
        Kind::Bandwidth,
        SLEEPING,
        ASYNC_BW_SIZES,
    ),
];

/// An atomic test (8-byte words only): `name`, the reference, and the
/// flags that pick the operation on each side.
const fn atomic(
    name: &'static str,
    test: &'static str,
    reference: &'static str,
    kind: Kind,
    ours: &'static [&'static str],
    theirs: &'static [&'static str],
    sized: bool,
) -> Pair {
    Pair {
        name,
        test,
        reference,
        kind,
        ours,
        theirs,
        sizes: &[8],
        sized,
        list: 1,
        scoped_reference: false,
    }
}

const FADD: &[&str] = &["-A", "FETCH_AND_ADD"];
const CSWAP: &[&str] = &["-A", "CMP_AND_SWAP"];
/// ucx_perftest's atomics run pipelined by default; one at a time for
/// latency.
const ONE_OUTSTANDING: &[&str] = &["-O", "1"];

/// Verbs: each test next to the perftest program of the same name; the
/// 8 B message rate with post lists of 64 (ferrovia's per-request cost
/// near a real `ibv_post_send`); the atomics; the async path.
pub(crate) const VERBS_PAIRS: [Pair; 16] = [
    pair("write_bw", "ib_write_bw", Kind::Bandwidth),
    pair("write_lat", "ib_write_lat", Kind::Latency),
    pair("read_bw", "ib_read_bw", Kind::Bandwidth),
    pair("read_lat", "ib_read_lat", Kind::Latency),
    pair("send_bw", "ib_send_bw", Kind::Bandwidth),
    pair("send_lat", "ib_send_lat", Kind::Latency),
    Pair {
        name: "write_bw:l64",
        ours: &["-l", "64"],
        theirs: &["-l", "64"],
        sizes: &[8],
        list: 64,
        ..pair("write_bw", "ib_write_bw", Kind::Bandwidth)
    },
    atomic(
        "atomic_lat:fadd",
        "atomic_lat",
        "ib_atomic_lat",
        Kind::Latency,
        FADD,
        FADD,
        false,
    ),
    atomic(
        "atomic_lat:cswap",
        "atomic_lat",
        "ib_atomic_lat",
        Kind::Latency,
        CSWAP,
        CSWAP,
        false,
    ),
    atomic(
        "atomic_bw:fadd",
        "atomic_bw",
        "ib_atomic_bw",
        Kind::Bandwidth,
        FADD,
        FADD,
        false,
    ),
    atomic(
        "atomic_bw:cswap",
        "atomic_bw",
        "ib_atomic_bw",
        Kind::Bandwidth,
        CSWAP,
        CSWAP,
        false,
    ),
    ASYNC_PAIRS[0],
    ASYNC_PAIRS[1],
    ASYNC_PAIRS[2],
    ASYNC_PAIRS[3],
    ASYNC_PAIRS[4],
];

/// UCX: RDMA write is a UCP put, send/receive a tagged message, RDMA read
/// a UCP get, the atomics UCP's fetching atomics (ferrovia's fetch-and-add
/// always fetches, so `ucp_add` is not its match); the async path.
pub(crate) const UCX_PAIRS: [Pair; 14] = [
    pair("write_bw", "ucp_put_bw", Kind::Bandwidth),
    pair("write_lat", "ucp_put_lat", Kind::Latency),
    pair("read_bw", "ucp_get", Kind::Bandwidth),
    pair("send_bw", "tag_bw", Kind::Bandwidth),
    pair("send_lat", "tag_lat", Kind::Latency),
    atomic(
        "atomic_lat:fadd",
        "atomic_lat",
        "ucp_fadd",
        Kind::Latency,
        FADD,
        ONE_OUTSTANDING,
        true,
    ),
    atomic(
        "atomic_lat:cswap",
        "atomic_lat",
        "ucp_cswap",
        Kind::Latency,
        CSWAP,
        ONE_OUTSTANDING,
        true,
    ),
    atomic(
        "atomic_bw:fadd",
        "atomic_bw",
        "ucp_fadd",
        Kind::Bandwidth,
        FADD,
        &[],
        true,
    ),
    atomic(
        "atomic_bw:cswap",
        "atomic_bw",
        "ucp_cswap",
        Kind::Bandwidth,
        CSWAP,
        &[],
        true,
    ),
    ASYNC_PAIRS[0],
    ASYNC_PAIRS[1],
    ASYNC_PAIRS[2],
    ASYNC_PAIRS[3],
    ASYNC_PAIRS[4],
];
