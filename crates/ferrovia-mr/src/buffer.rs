//! Registered memory the program can read and write: owned or borrowed.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU8, AtomicU64};

use crate::registration::Registration;

/// Registered memory with access to its bytes, for `'a`.
///
/// Made by [`MrRegistry::register_buffer`](crate::MrRegistry::register_buffer)
/// (owned, `'static`, see [`RegisteredBuffer`]) or
/// [`MrRegistry::register_slice`](crate::MrRegistry::register_slice)
/// (borrowed, see [`RegisteredSlice`]). It derefs to the bytes;
/// [`RegisteredMemory::split_mut`] yields the bytes and the registration at
/// once, as work requests need.
pub struct RegisteredMemory<'a> {
    reg: Registration<'a>,
    ptr: *mut u8,
    len: usize,
}

/// Owned registered memory.
pub type RegisteredBuffer = RegisteredMemory<'static>;

/// Borrowed registered memory.
pub type RegisteredSlice<'a> = RegisteredMemory<'a>;

// SAFETY: it is the unique accessor of its bytes (like `&'a mut [u8]`),
// and Registration is Send + Sync.
unsafe impl Send for RegisteredMemory<'_> {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for RegisteredMemory<'_> {}

impl<'a> RegisteredMemory<'a> {
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes for `'a` (kept
    /// alive by `reg`'s segment or by a borrow), and nothing else may
    /// access it while this value exists.
    pub(crate) unsafe fn new(reg: Registration<'a>, ptr: *mut u8, len: usize) -> Self {
        RegisteredMemory { reg, ptr, len }
    }

    /// The registration.
    pub fn registration(&self) -> &Registration<'a> {
        &self.reg
    }

    /// The bytes and the registration at once (for posting receives).
    pub fn split_mut(&mut self) -> (&mut [u8], &Registration<'a>) {
        // SAFETY: unique accessor, valid for 'a (constructor contract).
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) };
        (bytes, &self.reg)
    }
}

impl RegisteredMemory<'_> {
    /// The bytes as atomics, for memory a peer writes with RDMA while the
    /// program watches it (a flag, a counter): atomic loads see the
    /// device's writes without a data race on a plain `&[u8]`.
    pub fn as_atomic_bytes(&self) -> &[AtomicU8] {
        // SAFETY: AtomicU8 has the size and alignment of u8; the memory is
        // valid for the lifetime of `&self` (constructor contract).
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<AtomicU8>(), self.len) }
    }

    /// The whole 8-byte words of the memory as atomics, or `None` if it is
    /// not 8-byte aligned (memory from `MrRegistry::alloc` always is).
    pub fn as_atomic_u64s(&self) -> Option<&[AtomicU64]> {
        if !(self.ptr as usize).is_multiple_of(std::mem::align_of::<AtomicU64>()) {
            return None;
        }
        // SAFETY: aligned (checked above), in bounds (len / 8 whole
        // words), valid for `&self`; AtomicU64 allows shared mutation.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.cast::<AtomicU64>(), self.len / 8) })
    }
}

impl Deref for RegisteredMemory<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: valid for 'a and not mutably aliased while `&self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for RegisteredMemory<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.split_mut().0
    }
}

impl std::fmt::Debug for RegisteredMemory<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredMemory")
            .field("registration", &self.reg)
            .finish()
    }
}
