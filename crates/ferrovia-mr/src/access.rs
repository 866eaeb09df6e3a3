//! How the program may touch registered bytes: the type-level half of the
//! memory model (see the crate docs).
//!
//! A registration is [`Local`] or [`Shared`], decided when it is made
//! ([`RegisterOptions`](crate::RegisterOptions) carries the marker):
//!
//! - [`Local`]: only this process changes the bytes, and only through
//!   `&mut` (directly, or by a receive or read the program posted with a
//!   mutable borrow). Such memory derefs to `[u8]`: nothing can change it
//!   under a shared reference. Peers may be allowed to *read* it.
//! - [`Shared`]: the bytes may change at any moment: a peer may RDMA-write
//!   them or run atomics on them, or the program itself stores to them
//!   atomically while work that reads them is posted. Such memory is never
//!   reachable as `&[u8]` or `&mut [u8]`, because the optimizer may assume
//!   those do not change (a release build that spins on a `&[u8]` may read
//!   a stale value forever). It is read and written through atomics or
//!   copies.

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Local {}
    impl Sealed for super::Shared {}
}

/// The access discipline of a registration: [`Local`] or [`Shared`].
/// Sealed: the library's soundness rests on exactly these two meanings.
pub trait Access: sealed::Sealed + Copy + Send + Sync + std::fmt::Debug + 'static {
    /// Whether bytes may change while the program holds a shared borrow.
    const SHARED: bool;
}

/// Memory only this process changes, through `&mut`: it derefs to `[u8]`.
/// Peers may read it if [`RegisterOptions::allow_remote_read`](crate::RegisterOptions::allow_remote_read)
/// was asked for, never write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Local {}

/// Memory whose bytes may change at any time (peers' RDMA writes and
/// atomics, or the program's own atomic stores): reached only through
/// atomics and copies, never as a Rust slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shared {}

impl Access for Local {
    const SHARED: bool = false;
}

impl Access for Shared {
    const SHARED: bool = true;
}
