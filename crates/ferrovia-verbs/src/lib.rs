//! Safe verbs objects for ferrovia.
//!
//! RAII wrappers over libibverbs in which children keep their parents alive:
//! a [`QueuePair`] holds its [`ProtectionDomain`] and
//! [`CompletionQueue`]s, which hold the [`Context`], so dropping in any
//! order is sound. Everything that can fail returns a typed
//! [`VerbsError`] naming the verb and its errno, or a
//! [`CompletionError`] naming the work-completion status with its class
//! and a hint.
//!
//! With the `cm` feature (on by default), [`cm`] connects by address
//! through the RDMA connection manager: a listener accepts clients as they
//! come, a client needs only `host:port`, and the peers may be C programs.
//!
//! What is still `unsafe` here is posting work ([`QueuePair::post_send`],
//! [`QueuePair::post_recv`]) and raw registration
//! ([`MemoryRegion::register`]): the device reads and writes the memory
//! asynchronously, which only the layers above (`ferrovia-mr`,
//! `ferrovia-channel`) can tie to Rust lifetimes.
//!
//! ```no_run
//! use ferrovia_verbs::{CompletionQueue, Context, ProtectionDomain, QueuePair, ConnectOptions};
//!
//! # fn main() -> Result<(), ferrovia_verbs::VerbsError> {
//! let ctx = Context::open_default()?;
//! let pd = ProtectionDomain::new(&ctx)?;
//! let cq = CompletionQueue::with_channel(&ctx, 256)?;
//! let qp = QueuePair::builder(&pd, &cq, &cq).build()?;
//! let ours = qp.endpoint(); // send this to the peer, receive theirs
//! # let theirs = ours;
//! qp.connect(&theirs, &ConnectOptions::default())?;
//! # Ok(())
//! # }
//! ```
//!
//! ## Features
#![doc = document_features::document_features!()]
// docs.rs (`[package.metadata.docs.rs]`) marks each item with the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod async_event;
#[cfg(feature = "cm")]
pub mod cm;
mod completion;
mod connect;
mod context;
mod cq;
mod cq_ex;
mod device;
mod device_caps;
mod endpoint;
mod error;
mod gid;
mod mr;
mod mw;
mod pd;
mod port;
mod post_ex;
#[cfg(any(test, feature = "provider-double"))]
pub mod provider_double;
mod qp;
mod qp_ex;
mod srq;
mod types_abi;
mod ud;
mod wr;

pub use async_event::AsyncEvent;
pub use completion::WorkCompletion;
pub use connect::ConnectOptions;
pub use context::{AtomicCap, Context, DeviceAttributes};
pub use cq::CompletionQueue;
pub use cq_ex::{CqOptions, PollPath};
pub use device::{DeviceInfo, devices};
pub use device_caps::{DeviceCaps, ODP_RC_NEEDED, OdpCaps, WindowCaps};
pub use endpoint::Endpoint;
pub use error::{Result, VerbsError};
/// The transports' shared vocabulary, re-exported: verbs values as they are.
pub use ferrovia_types::{
    AccessFlags, CompletionError, Sge, WcClass, WcOpcode, WcStatus, page_size,
};
pub use gid::{Gid, GidEntry, GidType, pick_gid};
pub use mr::MemoryRegion;
pub use mw::MemoryWindow;
pub use pd::ProtectionDomain;
pub use port::{LinkLayer, Mtu, PortAttributes, PortState};
pub use qp::{QpCaps, QpState, QueuePair, QueuePairBuilder};
pub use qp_ex::PostPath;
pub use srq::SharedReceiveQueue;
pub use ud::{AddressHandle, DEFAULT_QKEY, DatagramAddress, GRH_BYTES, source_gid};
pub use wr::{RecvWr, SendWr, link_recv, link_send};
