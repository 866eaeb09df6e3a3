//! The verbs backend of ferrovia: the channel's transport seam over RC
//! queue pairs, beside `ferrovia-ucx`'s over UCX.
//!
//! - [`VerbsTransport`]: one RC queue pair per peer in a protection
//!   domain, sharing one completion queue (and, with a shared receive
//!   pool, one shared receive queue), as a `ferrovia_channel::transport::Transport`.
//! - [`VerbsBuilder`]: opens the device (`FERROVIA_DEVICE`, else the first
//!   with an active port) and builds a transport, a `MultiChannel` or a
//!   `Channel` on it, with the channel's settings and the verbs ones
//!   ([`VerbsConfig`]).
//! - [`VerbsMultiChannel`], [`VerbsChannel`]: what only verbs channels do,
//!   as extension methods: trade [`Endpoint`](ferrovia_verbs::Endpoint)s,
//!   connect, renew a peer's queue pair.
//! - [`VerbsRegistrar`] and [`registry`]: the memory registry's
//!   registrations in a protection domain (`ibv_reg_mr`).
//! - Verbs failures reach the channel as
//!   `TransportError::Backend` holding the `VerbsError` (the verb and its
//!   errno); [`verbs_error`] finds it.
//!
//! ```no_run
//! use std::time::Duration;
//! use ferrovia_channel::{Gather, ReceiveWorkRequest, Scatter, TransportError};
//! use ferrovia_mr::RegisterOptions;
//! use ferrovia_verbs_transport::{VerbsBuilder, VerbsChannel};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut a = VerbsBuilder::default().build()?;
//! let mut b = VerbsBuilder::default().build()?;
//! let (ea, eb) = (a.endpoint()?, b.endpoint()?); // exchanged out of band
//! a.connect(&eb)?;
//! b.connect(&ea)?;
//! let msg = a.registry().register_buffer(b"ping".to_vec(), RegisterOptions::local())?;
//! let mut inbox = b.registry().register_buffer(vec![0u8; 64], RegisterOptions::local())?;
//! b.scope(|rx| {
//!     let recv = rx.post_receive(ReceiveWorkRequest::new(Scatter::of(&mut inbox)?))?;
//!     a.send(&[Gather::of(&msg)?])?;
//!     let got = recv.wait(Duration::from_secs(5))?.into_received().unwrap_or_default();
//!     assert_eq!(got, b"ping");
//!     Ok::<_, TransportError>(())
//! })?;
//! # Ok(())
//! # }
//! ```

mod builder;
mod cm_watch;
mod config;
mod connect;
mod datagram;
mod error;
mod internal;
mod qp_table;
mod registrar;
mod shared_pool;
mod transport;
mod window;

pub use builder::VerbsBuilder;
pub use config::VerbsConfig;
pub use connect::{VerbsChannel, VerbsMultiChannel};
pub use datagram::{DatagramOptions, VerbsDatagrams};
pub use error::verbs_error;
pub use qp_table::QpRef;
pub use registrar::{VerbsRegistrar, registry};
pub use transport::VerbsTransport;
pub use window::{VerbsWindows, Window};
