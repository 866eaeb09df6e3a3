//! The buffer an owned request holds ([`OwnedBuf`]) until its completion,
//! and one handed back with its completion ([`Returned`]).

use std::ops::Range;
use std::sync::Arc;

use ferrovia_mr::{MrError, RegisteredBuffer, RegisteredMemory, SharedBuffer};
use ferrovia_types::{AccessFlags, Sge};

use crate::element::sge_of_range;
use crate::error::{TransportError, TransportResult};
use crate::op::Completion;

/// A registered buffer an owned request holds until its completion. The
/// memory of each kind stays where it is when the value moves, and is
/// freed only when the value (and every other handle of its
/// registration) is dropped.
#[derive(Debug)]
#[non_exhaustive]
pub enum OwnedBuf {
    /// Plain memory, owned: a send's or write's source, or a receive's,
    /// read's or atomic's target.
    Plain(RegisteredBuffer),
    /// Memory peers may write, owned: a send's or write's source only.
    PeerWritable(SharedBuffer),
    /// Plain memory shared with the program (read-only while the request
    /// holds it): a source only, e.g. one payload sent to many peers.
    PlainArc(Arc<RegisteredBuffer>),
    /// Memory peers may write, shared with the program (which changes it
    /// only by atomic stores): a source only.
    PeerWritableArc(Arc<SharedBuffer>),
}

impl OwnedBuf {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            OwnedBuf::Plain(b) => b.len(),
            OwnedBuf::PeerWritable(b) => b.len(),
            OwnedBuf::PlainArc(b) => b.len(),
            OwnedBuf::PeerWritableArc(b) => b.len(),
        }
    }

    /// Whether it is empty (never: registrations have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn sge(&self, range: Range<usize>) -> TransportResult<Sge> {
        match self {
            OwnedBuf::Plain(b) => sge_of_range(b, range),
            OwnedBuf::PeerWritable(b) => sge_of_range(b, range),
            OwnedBuf::PlainArc(b) => sge_of_range(&**b, range),
            OwnedBuf::PeerWritableArc(b) => sge_of_range(&**b, range),
        }
    }

    /// The buffer as a target the device may write: owned `Local` memory
    /// registered with local write, else why not.
    pub(crate) fn writable(&self) -> TransportResult<&RegisteredMemory<'static>> {
        match self {
            OwnedBuf::Plain(b) if b.registration().access().contains(AccessFlags::LOCAL_WRITE) => {
                Ok(b)
            }
            OwnedBuf::Plain(_) => Err(MrError::AccessNotGranted {
                what: "a receive, read or atomic buffer",
                needed: "LOCAL_WRITE",
            }
            .into()),
            _ => Err(TransportError::Config(
                "only an owned Local buffer can be a receive, read or atomic target".into(),
            )),
        }
    }
}

/// The buffer of an owned request nobody took, with its completion.
#[derive(Debug)]
pub struct Returned {
    /// How the request ended (a flush status if it was flushed).
    pub completion: Completion,
    /// Its buffer, which the device no longer touches.
    pub buf: OwnedBuf,
}
