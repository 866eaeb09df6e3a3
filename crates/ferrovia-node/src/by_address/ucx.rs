//! The UCX side of connecting by address: ferrovia's front door and UCX
//! transports (`listener`, `outgoing`, what they share in `connection`)
//! when this build has UCX, else a stand-in (`not_built`) whose
//! constructors refuse with a typed error and whose other types cannot
//! exist. The only place connection by address asks which backends were
//! built.

#[cfg(feature = "ucx")]
mod connection;
#[cfg(feature = "ucx")]
mod front_door;
#[cfg(feature = "ucx")]
mod listener;
#[cfg(not(feature = "ucx"))]
mod not_built;
#[cfg(feature = "ucx")]
mod outgoing;

#[cfg(feature = "ucx")]
pub(crate) use connection::Settings;
#[cfg(feature = "ucx")]
pub(crate) use listener::{UcxIncoming, UcxSide};
#[cfg(not(feature = "ucx"))]
pub(crate) use not_built::{Settings, UcxIncoming, UcxOutgoing, UcxSide, resolve};
#[cfg(feature = "ucx")]
pub(crate) use outgoing::{UcxOutgoing, resolve};
