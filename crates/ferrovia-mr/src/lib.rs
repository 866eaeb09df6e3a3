//! Memory-region registry and views for ferrovia.
//!
//! Real RDMA programs register a few large segments (a caching allocator's
//! block, a huge-page arena) once and hand out many small views into them:
//! registering per buffer costs tens of microseconds and pins memory.
//!
//! - [`MrRegistry`]: register a segment once ([`register_buffer`] for owned
//!   memory, [`register_slice`] for borrowed local memory,
//!   [`register_shared_slice`] and [`register_raw`] behind `unsafe`), look up a [`MemoryRegionView`] for any sub-range by virtual
//!   address, with the tightest covering registration chosen when several
//!   overlap. Registrations are reference-counted ([`Registration`]
//!   handles) and deregistered when the last handle drops; a view is never
//!   handed out beyond what its key covers. Thread-safe, with counters.
//! - [`MemoryRegionView`]: `id`, `virtual_addr`, `rdma_addr`, `size`,
//!   `lkey`, `rkey`, `access` (the registration's rights, which the
//!   descriptor [`MemoryRegionView::remote`] makes carries). `rdma_addr` differs from `virtual_addr` for
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
//! # What safe code may do with registered memory
//!
//! Every registration is [`Local`] or [`Shared`], a type parameter fixed
//! when it is made ([`RegisterOptions<A>`](RegisterOptions)):
//!
//! - **[`Local`]** (the default, and with
//!   [`allow_remote_read`](RegisterOptions::allow_remote_read)): only this
//!   process changes the bytes, through `&mut`. The memory derefs to
//!   `[u8]` and `&mut [u8]`. While a work request borrows it (see
//!   `ferrovia-channel`) the borrow checker forbids writing, moving or
//!   freeing it; a receive or read borrows it mutably and hands it back on
//!   completion. Peers granted remote read may read it at any time and
//!   see whatever bytes are there.
//! - **[`Shared`]** (after [`allow_remote_write`](RegisterOptions::allow_remote_write),
//!   [`allow_remote_atomic`](RegisterOptions::allow_remote_atomic) or
//!   [`shared`](RegisterOptions::shared)): the bytes may change at any
//!   moment, by a peer's RDMA write or atomic, or by the program's own
//!   atomic stores. Such memory is never reachable as `&[u8]` or
//!   `&mut [u8]`: the optimizer may assume a shared reference's bytes do
//!   not change, and a release build spinning on one can read a stale value
//!   forever. It is read and written as 8-byte atomic words
//!   ([`as_atomic_u64s`](RegisteredMemory::as_atomic_u64s),
//!   [`load_u64`](RegisteredMemory::load_u64),
//!   [`store_u64`](RegisteredMemory::store_u64)) or by copies
//!   ([`read_into`](RegisteredMemory::read_into),
//!   [`to_vec`](RegisteredMemory::to_vec),
//!   [`write_from`](RegisteredMemory::write_from)). Each byte has one
//!   granularity, because racing atomic accesses of different sizes are
//!   undefined behaviour: the bytes of whole aligned words are reached
//!   only as 8-byte words, and the bytes before the first whole word and
//!   after the last (memory registered from a `Vec<u8>`, which need not
//!   be 8-byte aligned, or of a length that is no whole number of words)
//!   only as single bytes. Which bytes are which is fixed by the
//!   registration's start and length, never by an access, so copies work
//!   at any offset and alignment while every access to one byte has one
//!   size. The word accessors need an 8-byte aligned word (a typed
//!   [`MrError::Misaligned`] otherwise); [`MrRegistry::alloc`] always
//!   starts page-aligned. It may be the source
//!   of sends and writes; the device then reads whatever bytes are there
//!   when it reads them (a store meanwhile may or may not be sent). It is
//!   never the target of a receive or read the program posts, since those
//!   hand the bytes back as a slice.
//! - **From shared back to plain bytes:**
//!   [`RegisteredMemory::into_local`] deregisters the shared registration
//!   (verbs: the device refuses its rkey from then on; UCX: every peer
//!   that fetched the key has acknowledged its revocation, or lost its
//!   connection) and only then hands the bytes back as [`Local`] memory.
//!   That deregistration is the proof that no peer can write any more.
//!
//! Writes by the NIC, by a peer through shared memory, or by UCX's progress
//! thread serving a peer's put happen outside the Rust abstract machine;
//! ferrovia treats them as atomic writes by an outside agent and never
//! forms a reference that would let the compiler assume otherwise.
//!
//! ```compile_fail
//! # use ferrovia_mr::{MrRegistry, RegisterOptions};
//! # fn f(registry: &MrRegistry) -> Result<(), ferrovia_mr::MrError> {
//! let inbox = registry.alloc(64, RegisterOptions::local().allow_remote_write())?;
//! let plain: &[u8] = &inbox; // Shared memory is not a slice
//! # Ok(()) }
//! ```
//!
//! A round trip, in a registry a backend made (verbs:
//! `ferrovia_verbs_transport::registry(&pd)`; UCX:
//! `MrRegistry::with_registrar(transport.registrar())`):
//!
//! ```no_run
//! use ferrovia_mr::{MrRegistry, RegisterOptions, RemoteMemoryRegion};
//!
//! # fn round_trip(registry: MrRegistry) -> Result<(), Box<dyn std::error::Error>> {
//! let opts = RegisterOptions::local().allow_remote_read().zero_based();
//! let segment = registry.alloc(16 << 20, opts)?; // page-aligned
//!
//! // A view of 4 KiB at 1 MiB into the segment, found by address.
//! let view = registry.view(segment.addr() + (1 << 20), 4096)?;
//! assert_eq!(view.rdma_addr, 1 << 20);
//!
//! // The peer's side: decode and navigate.
//! let wire = view.remote()?.encode();
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
//! [`register_shared_slice`]: MrRegistry::register_shared_slice
//! [`register_raw`]: MrRegistry::register_raw

mod access;
mod buffer;
mod error;
mod options;
mod registrar;
mod registration;
mod registry;
mod registry_state;
mod remote;
mod remote_typed;
mod segment;
mod stats;
mod table;
mod view;
mod wire;

pub use access::{Access, Local, Shared};
pub use buffer::{RegisteredBuffer, RegisteredMemory, RegisteredSlice, SharedBuffer, SharedSlice};
pub use error::{IntoLocalError, MrError};
pub use options::{Addressing, RegisterOptions};
pub use registrar::{Allocation, RegisteredKeys, Registrar};
pub use registration::Registration;
pub use registry::MrRegistry;
pub use remote::RemoteMemoryRegion;
pub use remote_typed::{RemoteArray, RemoteTyped};
pub use stats::RegistryStats;
pub use view::MemoryRegionView;
pub use wire::{WIRE_MAX_LEN, WIRE_VERSION};
