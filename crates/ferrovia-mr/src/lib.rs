//! Memory-region registry and views for ferrovia.
//!
//! Contract (filled in by the memory-registry work):
//! - `MemoryRegionView`: a view (`id`, `virtual_addr`, `rdma_addr`, `size`,
//!   `lkey`, `rkey`) into one large registration; `rdma_addr` differs from
//!   `virtual_addr` for zero-based registrations.
//! - `RemoteMemoryRegion`: what a peer needs to read or write (address,
//!   length, rkey) and nothing it must not have; small, `Copy`, with a
//!   versioned wire form.
//! - `MrRegistry`: register a segment once, hand out views for any
//!   sub-range, reference-count registrations, never hand out a view beyond
//!   what the key covers. Remote access is an explicit opt-in.
