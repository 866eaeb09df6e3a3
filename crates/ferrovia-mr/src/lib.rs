//! Memory-region registry and views for ferrovia.
//!
//! Real RDMA programs register a few large segments (a caching allocator's
//! block, a huge-page arena) once and hand out many small views into them:
//! registering per buffer costs tens of microseconds and pins memory.
//!
//! - [`MrRegistry`]: register a segment once ([`register_buffer`] for owned
//!   memory, [`register_slice`] for borrowed, [`register_raw`] behind
//!   `unsafe`), look up a [`MemoryRegionView`] for any sub-range by virtual
//!   address, with the tightest covering registration chosen when several
//!   overlap. Registrations are reference-counted ([`Registration`]
//!   handles) and deregistered when the last handle drops; a view is never
//!   handed out beyond what its key covers. Thread-safe, with counters.
//! - [`MemoryRegionView`]: `id`, `virtual_addr`, `rdma_addr`, `size`,
//!   `lkey`, `rkey`. `rdma_addr` differs from `virtual_addr` for
//!   zero-based registrations ([`RegisterOptions::zero_based`]).
//! - [`RemoteMemoryRegion`]: what a peer needs (address, length, rkey; no
//!   lkey), `Copy`, with a versioned wire form ([`RemoteMemoryRegion::encode`],
//!   [`RemoteMemoryRegion::decode`]) and typed navigation
//!   ([`RemoteTyped`], [`RemoteArray`], [`remote_field!`]).
//!
//! The memory always outlives its registration: owned buffers are freed
//! after deregistration, borrowed ones carry the borrow's lifetime.
//! Registration is local-only unless remote access is asked for
//! ([`RegisterOptions::allow_remote_write`] and friends).
//!
//! A round trip (needs a device, so not run as a doctest):
//!
//! ```no_run
//! use ferrovia_mr::{MrRegistry, RegisterOptions, RemoteMemoryRegion};
//! use ferrovia_verbs::{Context, ProtectionDomain};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pd = ProtectionDomain::new(&Context::open_default()?)?;
//! let registry = MrRegistry::new(&pd);
//! let opts = RegisterOptions::local().allow_remote_read().zero_based();
//! let segment = registry.alloc(16 << 20, opts)?; // page-aligned
//!
//! // A view of 4 KiB at 1 MiB into the segment, found by address.
//! let view = registry.view(segment.as_ptr() as usize + (1 << 20), 4096)?;
//! assert_eq!(view.rdma_addr, 1 << 20);
//!
//! // The peer's side: decode and navigate.
//! let wire = view.remote().encode();
//! let remote = RemoteMemoryRegion::decode(&wire)?;
//! let slots = remote.array::<u64>()?;
//! assert_eq!(slots.len(), 512);
//! drop(segment); // last handle: deregistered, then freed
//! assert_eq!(registry.stats().live_registrations, 0);
//! # Ok(())
//! # }
//! ```
//!
//! [`register_buffer`]: MrRegistry::register_buffer
//! [`register_slice`]: MrRegistry::register_slice
//! [`register_raw`]: MrRegistry::register_raw

mod buffer;
mod error;
mod options;
mod registrar;
mod registration;
mod registry;
mod remote;
mod remote_typed;
mod segment;
mod stats;
mod view;
mod wire;

pub use buffer::{RegisteredBuffer, RegisteredMemory, RegisteredSlice};
pub use error::MrError;
pub use options::{Addressing, RegisterOptions};
pub use registrar::{Allocation, RegisteredKeys, Registrar};
pub use registration::Registration;
pub use registry::MrRegistry;
pub use remote::RemoteMemoryRegion;
pub use remote_typed::{RemoteArray, RemoteTyped};
pub use stats::RegistryStats;
pub use view::MemoryRegionView;
pub use wire::{WIRE_MAX_LEN, WIRE_VERSION};
