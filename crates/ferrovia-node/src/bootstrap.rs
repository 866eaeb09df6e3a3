//! Bootstrap: how a rank learns who it is (the launchers' variables, or a
//! local launch), which job it belongs to (the token), and how the ranks
//! meet (rank 0's rendezvous, its wire format, the addresses peers reach).
//! [`Node`](crate::Node) runs it; the rendezvous is public for programs
//! that connect transports of their own.

pub(crate) mod address;
pub(crate) mod engine_vars;
pub(crate) mod launcher;
pub(crate) mod local_launch;
pub(crate) mod meeting;
pub(crate) mod pmix;
pub(crate) mod rendezvous;
pub(crate) mod token;
pub(crate) mod wire;

pub use rendezvous::{Rendezvous, RendezvousConfig, Session, exchange};
pub use wire::PROTOCOL_VERSION;
