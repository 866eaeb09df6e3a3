//! The buffers an operation can own, and how they travel through the
//! engine and back.

use std::sync::Arc;

use ferrovia_channel::OwnedBuf;
use ferrovia_mr::{RegisteredBuffer, RegisteredMemory, SharedBuffer};

mod sealed {
    pub trait Sealed {}
}

/// A registered buffer an operation takes by value and hands back in its
/// output (or its error): owned `'static` registered memory, or an `Arc`
/// of it to share one source among many operations.
///
/// | type | as |
/// |---|---|
/// | [`RegisteredBuffer`] (owned [`Local`](ferrovia_mr::Local) memory) | any operation's buffer |
/// | [`SharedBuffer`] (memory peers may write) | a send's or write's source |
/// | `Arc<RegisteredBuffer>`, `Arc<SharedBuffer>` | a send's or write's source, read by several operations at once |
///
/// Borrowed registrations (`RegisteredSlice<'a>`) are not buffers of
/// operations: a future can be forgotten, so nothing it holds may end a
/// borrow. Sealed: the engine hands back exactly what it was given.
pub trait OpBuffer: sealed::Sealed + Send + Sized + 'static {
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether it is empty (never: registrations have at least one byte).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    #[doc(hidden)]
    fn into_owned(self) -> OwnedBuf;
    #[doc(hidden)]
    fn from_owned(buf: OwnedBuf) -> Option<Self>;
}

/// An [`OpBuffer`] a send or write can read.
pub trait Source: OpBuffer {}

macro_rules! buffer {
    ($t:ty, $variant:ident, |$b:ident| $len:expr) => {
        impl sealed::Sealed for $t {}
        impl OpBuffer for $t {
            fn len(&self) -> usize {
                let $b = self;
                $len
            }
            fn into_owned(self) -> OwnedBuf {
                OwnedBuf::$variant(self)
            }
            fn from_owned(buf: OwnedBuf) -> Option<Self> {
                match buf {
                    OwnedBuf::$variant(b) => Some(b),
                    _ => None,
                }
            }
        }
        impl Source for $t {}
    };
}

buffer!(RegisteredBuffer, Plain, |b| RegisteredMemory::len(b));
buffer!(SharedBuffer, PeerWritable, |b| RegisteredMemory::len(b));
buffer!(Arc<RegisteredBuffer>, PlainArc, |b| RegisteredMemory::len(
    &**b
));
buffer!(Arc<SharedBuffer>, PeerWritableArc, |b| {
    RegisteredMemory::len(&**b)
});
