//! Test support for the ferrovia workspace (`publish = false`): what the
//! crates' tests and benches share, in one place.
//!
//! - transport doubles behind the channel's `Transport` seam, which touch
//!   no memory: [`Double`] (completes at once or when told), [`Counting`]
//!   (the cheapest, for benches), [`PoolDouble`] (a shared receive pool);
//! - registrars that need no device: [`NoDevice`], [`FakeRegistrar`];
//! - [`Target`], a scope target over a bare `ChannelCore`;
//! - [`CountingAlloc`], to show a path allocates nothing;
//! - [`HostDmaBuf`], a real dma-buf of host memory (`udmabuf`, else `vgem`);
//! - [`Job`], a multi-process job on loopback, [`mpirun`], one under
//!   Open MPI's launcher (PMIx), and the child-process helpers
//!   ([`finish`], [`Cost`], [`in_child_with`]); [`Etcd`], a private etcd
//!   server for the membership tests;
//! - `init_logs` (feature `ranks`): the rank programs' log output.
//!
//! The crate also holds the rank programs `ferrovia-rank` (the demo, the
//! barrier benchmark, the node's multi-process tests) and
//! `ferrovia-async-rank` (the async layer's), and the multi-process tests
//! that drive them (`tests/`), which find them through cargo's
//! `CARGO_BIN_EXE_*`. Lower crates take it as a dev-dependency without
//! default features: then it builds without the node and the async layer.
#![doc = document_features::document_features!()]

mod alloc;
mod child;
mod counting;
mod dmabuf;
mod double;
mod etcd;
mod job;
#[cfg(feature = "ranks")]
mod logs;
mod mpirun;
mod pool;
mod registrars;
mod registry_load;
mod target;

pub use alloc::{CountingAlloc, count_allocations};
pub use child::{Cost, finish, in_child_with};
pub use counting::Counting;
pub use dmabuf::HostDmaBuf;
pub use double::{Double, Mode};
pub use etcd::Etcd;
pub use job::{BackendEnv, Job};
#[cfg(feature = "ranks")]
pub use logs::init_logs;
pub use mpirun::{RankOutput, mpirun};
pub use pool::PoolDouble;
pub use registrars::{FakeRegistrar, NoDevice, registry};
pub use registry_load::eight_threads_register_and_look_up;
pub use target::{Target, target};
