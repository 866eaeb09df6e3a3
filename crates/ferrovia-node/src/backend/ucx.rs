//! The UCX backend of a node: the real one (`built`) when this build has
//! UCX, else a stand-in (`not_built`) that refuses with a typed error.
//! With `verbs.rs`, the only place the node asks which backends were
//! built.

#[cfg(feature = "ucx")]
mod built;
#[cfg(not(feature = "ucx"))]
mod not_built;

#[cfg(feature = "ucx")]
pub(crate) use built::{BUILT, Opened, RailSide};
#[cfg(not(feature = "ucx"))]
pub(crate) use not_built::{BUILT, Opened, RailSide};
