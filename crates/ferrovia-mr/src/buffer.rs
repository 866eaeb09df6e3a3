//! Registered memory the program can reach: owned or borrowed, [`Local`]
//! (plain bytes) or [`Shared`] (atomics and copies only).

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut, Range};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU8, AtomicU64, fence};

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

/// Borrowed memory peers may write ([`Shared`]), from the `unsafe`
/// [`MrRegistry::register_shared_slice`](crate::MrRegistry::register_shared_slice).
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
    /// `Shared`, `ptr..ptr+len` must be `reg`'s whole segment, whose
    /// atomic span (`len` or more) must be valid like the rest, at any
    /// alignment.
    pub(crate) unsafe fn new(reg: Registration<'a>, ptr: *mut u8, len: usize) -> Self {
        debug_assert!(!A::SHARED || (reg.seg.addr == ptr as usize && reg.seg.len == len));
        debug_assert!(reg.seg.span >= len);
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
    /// Where the whole words are: byte offsets `lo..hi` of the aligned
    /// 8-byte words inside the accessible span. Bytes before `lo` (an
    /// unaligned start's head) and from `hi` on (a partial tail) are
    /// byte-granular. A property of the registration, never of an access,
    /// so every access to a byte has the same size.
    fn word_bounds(&self) -> (usize, usize) {
        // The segment's, kept there so this value stays small.
        let span = self.reg.seg.span;
        let lo = ((8 - self.ptr as usize % 8) % 8).min(span);
        let hi = lo + (span - lo) / 8 * 8;
        (lo, hi)
    }

    /// The whole words, from offset `word_bounds().0`.
    fn words(&self) -> &[AtomicU64] {
        let (lo, hi) = self.word_bounds();
        if lo == hi {
            // No whole word (`ptr + lo` may then be unaligned).
            return &[];
        }
        // SAFETY: `ptr + lo` is 8-byte aligned and `lo..hi` lies inside
        // the span, valid for `&self` (constructor contract); these bytes
        // are only ever reached as these words (`word_bounds` fixes the
        // granularity per byte), never as a plain slice or as bytes; DMA
        // counts as an outside writer.
        unsafe { std::slice::from_raw_parts(self.ptr.add(lo).cast::<AtomicU64>(), (hi - lo) / 8) }
    }

    /// The byte-granular bytes at offsets `range`, which lies in
    /// `0..word_bounds().0` or in `word_bounds().1..len`.
    fn edge_bytes(&self, range: Range<usize>) -> &[AtomicU8] {
        debug_assert!({
            let (lo, hi) = self.word_bounds();
            range.end <= lo || (range.start >= hi && range.end <= self.len)
        });
        // SAFETY: `range` is inside `0..len` and outside the words (callers
        // take it from `word_bounds`), valid for `&self` (constructor
        // contract); these bytes are only ever reached as byte atomics,
        // never as words or a plain slice. `AtomicU8` has alignment 1.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr.add(range.start).cast::<AtomicU8>(),
                range.end - range.start,
            )
        }
    }

    /// The memory as 8-byte atomic words, for memory that starts 8-byte
    /// aligned (anything [`MrRegistry::alloc`](crate::MrRegistry::alloc)
    /// made does); [`MrError::Misaligned`] otherwise (index `i` would not
    /// be byte `8 * i`). There is a word for every whole 8 bytes; memory
    /// from `alloc` has one more for a partial last word, reaching into
    /// the allocation's padding (which no peer can write). The bytes of a
    /// partial last word of memory registered from a buffer or slice are
    /// no word's: copies reach them.
    ///
    /// One granularity per byte: racing atomic accesses of different
    /// sizes to the same bytes are undefined behaviour in Rust's memory
    /// model, so the bytes of these words are never reached as byte
    /// atomics (copies load and store them as words too).
    pub fn as_atomic_u64s(&self) -> Result<&[AtomicU64], MrError> {
        if !(self.ptr as usize).is_multiple_of(8) {
            return Err(MrError::Misaligned {
                addr: self.ptr as usize,
                align: 8,
            });
        }
        Ok(self.words())
    }

    /// The 8-byte word at byte `offset`, whose address must be 8-byte
    /// aligned (for memory starting aligned: `offset` a multiple of 8)
    /// and whose 8 bytes must be in range.
    pub fn atomic_u64(&self, offset: usize) -> Result<&AtomicU64, MrError> {
        let (addr, _) = self.checked_range(offset..offset.saturating_add(8))?;
        if !addr.is_multiple_of(8) {
            return Err(MrError::Misaligned { addr, align: 8 });
        }
        // An aligned word in range is whole, so it is one of the words.
        let (lo, _) = self.word_bounds();
        offset
            .checked_sub(lo)
            .and_then(|o| self.words().get(o / 8))
            .ok_or(MrError::Misaligned { addr, align: 8 })
    }

    /// Loads the 8-byte word at byte `offset` (`Acquire`): how the owner
    /// reads a flag or counter peers update with RDMA writes or atomics.
    /// Its address must be 8-byte aligned ([`RegisteredMemory::atomic_u64`]).
    pub fn load_u64(&self, offset: usize) -> Result<u64, MrError> {
        Ok(self.atomic_u64(offset)?.load(Acquire))
    }

    /// Stores the 8-byte word at byte `offset` (`Release`); its address
    /// must be 8-byte aligned ([`RegisteredMemory::atomic_u64`]).
    pub fn store_u64(&self, offset: usize, value: u64) -> Result<(), MrError> {
        self.atomic_u64(offset)?.store(value, Release);
        Ok(())
    }

    /// Copies `out.len()` bytes from byte `offset` into `out`, after an
    /// `Acquire` fence. Bytes a peer writes meanwhile may be seen old or
    /// new: read once the peer said it is done (a message, an immediate, a
    /// barrier, a flag loaded with `Acquire`). Any offset and length in
    /// range, at any alignment of the memory: whole words are loaded as
    /// words, the bytes before the first and after the last whole word as
    /// bytes.
    pub fn read_into(&self, offset: usize, out: &mut [u8]) -> Result<(), MrError> {
        if out.is_empty() {
            return Ok(());
        }
        self.checked_range(offset..offset.saturating_add(out.len()))?;
        fence(Acquire);
        let ((lo, hi), words) = (self.word_bounds(), self.words());
        let end = offset + out.len();
        let mut pos = offset;
        while pos < end {
            let dst = &mut out[pos - offset..];
            if pos < lo || pos >= hi {
                let stop = if pos < lo { end.min(lo) } else { end };
                for (o, b) in dst.iter_mut().zip(self.edge_bytes(pos..stop)) {
                    *o = b.load(Relaxed);
                }
                pos = stop;
            } else {
                let (w, skip) = ((pos - lo) / 8, (pos - lo) % 8);
                let take = (8 - skip).min(end - pos);
                let bytes = words[w].load(Relaxed).to_ne_bytes();
                dst[..take].copy_from_slice(&bytes[skip..skip + take]);
                pos += take;
            }
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
    /// later flag store or post publishes it. Any offset and length in
    /// range, at any alignment of the memory: whole words are stored as
    /// words, and a partly covered word with a compare-and-swap that
    /// leaves its other bytes as they are, even if a peer writes them
    /// meanwhile; the bytes before the first and after the last whole
    /// word are stored one by one.
    pub fn write_from(&self, offset: usize, src: &[u8]) -> Result<(), MrError> {
        if src.is_empty() {
            return Ok(());
        }
        self.checked_range(offset..offset.saturating_add(src.len()))?;
        let ((lo, hi), words) = (self.word_bounds(), self.words());
        let end = offset + src.len();
        let mut pos = offset;
        while pos < end {
            let part = &src[pos - offset..];
            if pos < lo || pos >= hi {
                let stop = if pos < lo { end.min(lo) } else { end };
                for (b, &v) in self.edge_bytes(pos..stop).iter().zip(part) {
                    b.store(v, Relaxed);
                }
                pos = stop;
                continue;
            }
            let (w, skip) = ((pos - lo) / 8, (pos - lo) % 8);
            let take = (8 - skip).min(end - pos);
            let part = &part[..take];
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
            pos += take;
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
