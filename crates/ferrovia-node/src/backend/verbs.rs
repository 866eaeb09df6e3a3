//! The verbs backend of a node: the real one (`built`) when this build has
//! verbs, else a stand-in (`not_built`) that refuses with a typed error.
//! With `ucx.rs`, the only place the node asks which backends were built.

#[cfg(feature = "verbs")]
mod built;
#[cfg(not(feature = "verbs"))]
mod not_built;

#[cfg(feature = "verbs")]
pub(crate) use built::{DatagramSide, Opened, RailSide, Settings, default_settings, with_device};
#[cfg(not(feature = "verbs"))]
pub(crate) use not_built::{
    DatagramSide, Opened, RailSide, Settings, default_settings, with_device,
};
