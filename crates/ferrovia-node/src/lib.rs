//! Multi-peer `Node` for ferrovia.
//!
//! The transport is verbs when a device with an active port opens, else
//! UCX (feature `ucx`, on by default); `FERROVIA_BACKEND=verbs|ucx` or
//! [`NodeBuilder::backend`] overrides, and [`Node::backend`] tells.
//!
//! A [`Node`] is one rank of a job started by the launcher people already
//! use (torchrun, Slurm's srun, mpirun, or explicit `FERROVIA_*`
//! variables; see [`launch::from_vars`]), or started by itself
//! ([`Node::from_env_or_launch`]). Rank 0 hosts a TCP rendezvous:
//! every rank sends its queue-pair endpoints (or UCX worker address) once
//! and receives everyone's (O(n) connections, a job token checked on each
//! before anything else is read, deadlines throughout, and rank 0's threads,
//! connections and memory bounded whatever connects: see
//! `docs/ARCHITECTURE.md`). The token is `FERROVIA_JOB_TOKEN`, else derived
//! from the launcher's job id (no secret, but no public default either: a
//! job with neither does not start); a local launch makes a random one.
//! Then every rank holds one RC connection to every rank and posts to
//! peers by rank inside [`Node::scope`], with [`NodeScope::barrier`]:
//! one-sided RDMA writes read with atomic loads, each signal matched to
//! its barrier by identity (it returns only once every listed rank entered
//! that same barrier); dissemination by default, centralized and binary
//! tree selectable; any sorted subset of ranks; a timeout names the ranks
//! that did not arrive, and a rank that fails a barrier tells the others,
//! so they fail at once naming it.
//!
//! How the ranks meet depends on how they were started (see
//! [`launch::Engine`] and [`Node::engine`]): rank 0's rendezvous above by
//! default; under a PMIx launcher (`mpirun`, `srun --mpi=pmix`) PMIx's own
//! exchange (feature `pmix`); with `FERROVIA_STORE=etcd://...` a store
//! whose members hold leases, so a dead rank drops out
//! ([`MemberEvent::Left`]) and a new process takes its place
//! ([`Node::admit`]; feature `etcd`).
//!
//! A node also opens [`Rail`]s for layers that spread transfers over
//! several devices or UCX workers ([`Node::open_rail`]): more connections
//! to every rank, each set on a backend of its own, whose connections are
//! replaced through the node's control path ([`Node::reconnect_with`]).
//!
//! ## Features
#![doc = document_features::document_features!()]
// docs.rs (`[package.metadata.docs.rs]`) marks each item with the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

mod backend;
mod backend_name;
mod barrier;
mod barrier_task;
pub mod bootstrap;
mod builder;
mod by_address;
mod control;
mod control_path;
mod datagrams;
mod error;
mod membership;
mod node;
mod rail;
mod reconnect;
mod stats;
mod sync_region;

pub use backend_name::{Backend, UnknownBackend};
pub use barrier::BarrierAlgorithm;
pub use barrier_task::BarrierTask;
pub use bootstrap::launcher::{Engine, LaunchInfo, Launcher};
pub use builder::NodeBuilder;
pub use by_address::{
    ACCEPT_DATA_MAX, CONNECT_DATA_MAX, ConnectError, Connector, Incoming, Listener,
    ListenerBuilder, Outgoing, REJECT_DATA_MAX, connect, local_ip,
};
pub use datagrams::DatagramConfig;
pub use error::{AbandonCause, BarrierError, BootstrapError, NodeError, RailError};
pub use membership::{ETCD_PORT, LeaveReason, MemberEvent, StoreConfig};
pub use node::{Node, NodeScope};
pub use rail::{Rail, RailSpec};

/// How a rank learns who it is: the launchers' variables, read.
pub mod launch {
    pub use crate::bootstrap::launcher::{DEFAULT_PORT, Engine, LaunchInfo, Launcher, from_vars};
    pub use crate::bootstrap::token::TokenSource;
}
