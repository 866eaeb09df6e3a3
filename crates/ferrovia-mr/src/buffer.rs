//! Registered memory the program can reach: owned or borrowed, [`Local`]
//! (plain bytes) or [`Shared`] (atomics and copies only).

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut, Range};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU64, fence};

use crate::access::{Access, Local, Shared};
use crate::error::MrError;
use crate::registration::Registration;

/// Registered memory, reachable for `'a`, with the access discipline `A`.
///
/// Made by [`MrRegistry::register_buffer`](crate::MrRegistry::register_buffer)
/// and [`MrRegistry::alloc`](crate::MrRegistry::alloc) (owned, `'static`,
/// see [`RegisteredBuffer`]) or
/// [`MrRegistry::register_slice`](crate::MrRegistry::register_slice)
/// (borrowed, see [`RegisteredSlice`]).
///
/// - `RegisteredMemory<'a, Local>` derefs to its bytes;
///   [`RegisteredMemory::split_mut`] yields the bytes and the
///   registration at once, as receive and read requests need.
/// - `RegisteredMemory<'a, Shared>` (memory peers may write) has no
///   `Deref`: read it with [`read_into`](RegisteredMemory::read_into),
///   [`to_vec`](RegisteredMemory::to_vec),
///   [`load_u64`](RegisteredMemory::load_u64) or the atomic views, and
///   write it with [`write_from`](RegisteredMemory::write_from) and
///   [`store_u64`](RegisteredMemory::store_u64).
pub struct RegisteredMemory<'a, A: Access = Local> {
    pub(crate) reg: Registration<'a>,
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
    _access: PhantomData<A>,
}

/// Owned registered memory.
pub type RegisteredBuffer<A = Local> = RegisteredMemory<'static, A>;

/// Borrowed registered memory.
pub type RegisteredSlice<'a, A = Local> = RegisteredMemory<'a, A>;

/// Owned memory peers may write ([`Shared`]).
pub type SharedBuffer = RegisteredMemory<'static, Shared>;

/// Borrowed memory peers may write ([`Shared`]).
pub type SharedSlice<'a> = RegisteredMemory<'a, Shared>;

// SAFETY: it is the unique accessor of its bytes (like `&'a mut [u8]`) for
// `Local`, and an accessor through atomics only for `Shared`;
// Registration is Send + Sync.
unsafe impl<A: Access> Send for RegisteredMemory<'_, A> {}
// SAFETY: shared access hands out `&[u8]` for `Local` (no mutation through
// `&self`), and only atomics for `Shared`.
unsafe impl<A: Access> Sync for RegisteredMemory<'_, A> {}

impl<'a, A: Access> RegisteredMemory<'a, A> {
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes for `'a` (kept
    /// alive by `reg`'s segment or by a borrow) and nothing else in this
    /// process may access it while this value exists. If `A` is `Local`,
    /// `reg` must grant peers no write or atomic access; if `A` is
    /// `Shared`, `ptr` must be 8-byte aligned and valid for `len` rounded
    /// up to a multiple of 8.
    pub(crate) unsafe fn new(reg: Registration<'a>, ptr: *mut u8, len: usize) -> Self {
        RegisteredMemory {
            reg,
            ptr,
            len,
            _access: PhantomData,
        }
    }

    /// The registration.
    pub fn registration(&self) -> &Registration<'a> {
        &self.reg
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes (never: registrations have at least one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Address of the first byte in this process (for address arithmetic
    /// and [`MrRegistry::view`](crate::MrRegistry::view); not for access).
    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// `range` as (address, length) after a bounds check: what work
    /// requests describe without ever forming a slice of the bytes.
    pub fn checked_range(&self, range: Range<usize>) -> Result<(usize, usize), MrError> {
        if range.start >= range.end || range.end > self.len {
            return Err(MrError::OutOfRange {
                id: self.reg.id(),
                offset: range.start as u64,
                len: range.end.saturating_sub(range.start) as u64,
                size: self.len as u64,
            });
        }
        Ok((self.ptr as usize + range.start, range.end - range.start))
    }
}

impl<'a> RegisteredMemory<'a, Local> {
    /// The bytes and the registration at once (for posting receives).
    pub fn split_mut(&mut self) -> (&mut [u8], &Registration<'a>) {
        // SAFETY: unique accessor, valid for 'a, and no peer may write
        // `Local` memory (constructor contract).
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) };
        (bytes, &self.reg)
    }
}

impl Deref for RegisteredMemory<'_, Local> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: valid for 'a; nothing writes `Local` memory except
        // through `&mut self` (or a request holding that borrow).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for RegisteredMemory<'_, Local> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.split_mut().0
    }
}

impl RegisteredMemory<'_, Shared> {
    /// The memory as 8-byte atomic words (the last one may reach past
    /// `len()` into padding of the allocation, which no peer can write).
    ///
    /// Words are the only granularity: racing atomic accesses of different
    /// sizes to the same bytes are undefined behaviour in Rust's memory
    /// model, so `Shared` memory never hands out byte atomics beside these.
    pub fn as_atomic_u64s(&self) -> &[AtomicU64] {
        // SAFETY: `Shared` memory starts 8-byte aligned and its allocation
        // covers `len` rounded up to whole words (checked when it was
        // registered); it is valid for `&self` (constructor contract) and
        // is never reachable as a plain slice, so every access is an atomic
        // word access (DMA counts as an outside writer).
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<AtomicU64>(), self.len.div_ceil(8)) }
    }

    /// The 8-byte word at byte `offset` (8-byte aligned, in range).
    pub fn atomic_u64(&self, offset: usize) -> Result<&AtomicU64, MrError> {
        let (addr, _) = self.checked_range(offset..offset.saturating_add(8))?;
        if !offset.is_multiple_of(8) {
            return Err(MrError::Misaligned { addr, align: 8 });
        }
        Ok(&self.as_atomic_u64s()[offset / 8])
    }

    /// Loads the 8-byte word at byte `offset` (`Acquire`): how the owner
    /// reads a flag or counter peers update with RDMA writes or atomics.
    pub fn load_u64(&self, offset: usize) -> Result<u64, MrError> {
        Ok(self.atomic_u64(offset)?.load(Acquire))
    }

    /// Stores the 8-byte word at byte `offset` (`Release`).
    pub fn store_u64(&self, offset: usize, value: u64) -> Result<(), MrError> {
        self.atomic_u64(offset)?.store(value, Release);
        Ok(())
    }

    /// Copies `out.len()` bytes from byte `offset` into `out`, after an
    /// `Acquire` fence. Bytes a peer writes meanwhile may be seen old or
    /// new: read once the peer said it is done (a message, an immediate, a
    /// barrier, a flag loaded with `Acquire`).
    pub fn read_into(&self, offset: usize, out: &mut [u8]) -> Result<(), MrError> {
        if out.is_empty() {
            return Ok(());
        }
        self.checked_range(offset..offset.saturating_add(out.len()))?;
        fence(Acquire);
        let words = self.as_atomic_u64s();
        let mut at = 0;
        while at < out.len() {
            let pos = offset + at;
            let (w, skip) = (pos / 8, pos % 8);
            let take = (8 - skip).min(out.len() - at);
            let bytes = words[w].load(Relaxed).to_ne_bytes();
            out[at..at + take].copy_from_slice(&bytes[skip..skip + take]);
            at += take;
        }
        Ok(())
    }

    /// A copy of all the bytes (see [`RegisteredMemory::read_into`]).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0; self.len];
        // In range by construction.
        let _ = self.read_into(0, &mut out);
        out
    }

    /// Copies `src` to byte `offset`, then issues a `Release` fence so a
    /// later flag store or post publishes it. Whole words are stored; a
    /// partly covered word is updated with a compare-and-swap that leaves
    /// its other bytes as they are, even if a peer writes them meanwhile.
    pub fn write_from(&self, offset: usize, src: &[u8]) -> Result<(), MrError> {
        if src.is_empty() {
            return Ok(());
        }
        self.checked_range(offset..offset.saturating_add(src.len()))?;
        let words = self.as_atomic_u64s();
        let mut at = 0;
        while at < src.len() {
            let pos = offset + at;
            let (w, skip) = (pos / 8, pos % 8);
            let take = (8 - skip).min(src.len() - at);
            let part = &src[at..at + take];
            if take == 8 {
                let mut word = [0; 8];
                word.copy_from_slice(part);
                words[w].store(u64::from_ne_bytes(word), Relaxed);
            } else {
                let _ = words[w].fetch_update(Relaxed, Relaxed, |old| {
                    let mut bytes = old.to_ne_bytes();
                    bytes[skip..skip + take].copy_from_slice(part);
                    Some(u64::from_ne_bytes(bytes))
                });
            }
            at += take;
        }
        fence(Release);
        Ok(())
    }
}

impl<A: Access> std::fmt::Debug for RegisteredMemory<'_, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredMemory")
            .field("access", &if A::SHARED { "Shared" } else { "Local" })
            .field("registration", &self.reg)
            .finish()
    }
}
