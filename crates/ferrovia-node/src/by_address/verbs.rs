//! The verbs side of connecting by address: the connection manager
//! (`built`) when this build has verbs, else a stand-in (`not_built`)
//! whose constructors refuse with a typed error and whose other types
//! cannot exist. The only place connection by address asks which
//! backends were built.

#[cfg(feature = "verbs")]
mod built;
#[cfg(not(feature = "verbs"))]
mod not_built;

#[cfg(feature = "verbs")]
pub(crate) use built::{VerbsIncoming, VerbsListener, VerbsOutgoing, local_ip, resolve};
#[cfg(not(feature = "verbs"))]
pub(crate) use not_built::{VerbsIncoming, VerbsListener, VerbsOutgoing, local_ip, resolve};
