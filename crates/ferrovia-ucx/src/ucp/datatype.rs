//! How buffers are described to UCX: contiguous bytes, an iovec of a
//! message's elements ([`Iov`]), or one 8-byte word (atomics).

use std::ffi::c_void;
use std::ptr::null_mut;

use ferrovia_channel::MAX_ELEMENTS;
use ferrovia_types::Sge;

use super::ffi;

/// Contiguous bytes.
const CONTIG_BYTES: ffi::ucp_datatype_t =
    (1 << ffi::UCP_DATATYPE_SHIFT) | ffi::UCP_DATATYPE_CONTIG as ffi::ucp_datatype_t;

/// One 8-byte word, as UCX describes a contiguous datatype.
pub(super) const WORD: ffi::ucp_datatype_t =
    (8 << ffi::UCP_DATATYPE_SHIFT) | ffi::UCP_DATATYPE_CONTIG as ffi::ucp_datatype_t;

/// The iovec of a message of several elements: it must live until UCX is
/// done with the operation (boxed, so it stays put while its owner moves).
pub(crate) struct Iov(Box<[ffi::ucp_dt_iov; MAX_ELEMENTS]>);

/// Buffer, count and datatype of a message, as a tagged send or receive
/// takes them.
#[derive(Clone, Copy)]
pub(crate) struct Layout {
    pub(super) buf: *mut c_void,
    pub(super) count: usize,
    pub(super) datatype: ffi::ucp_datatype_t,
}

/// The layout of a message over `sges`, using `iov` for several (it must
/// then live until UCX is done with the operation).
#[inline]
pub(crate) fn layout(sges: &[Sge], iov: &mut Option<Iov>) -> Layout {
    match sges {
        [] => Layout {
            buf: null_mut(),
            count: 0,
            datatype: CONTIG_BYTES,
        },
        [one] => Layout {
            buf: one.addr() as usize as *mut c_void,
            count: one.length() as usize,
            datatype: CONTIG_BYTES,
        },
        many => {
            let v = &mut iov
                .insert(Iov(Box::new([ffi::ucp_dt_iov::default(); MAX_ELEMENTS])))
                .0;
            for (slot, s) in v.iter_mut().zip(many) {
                slot.buffer = s.addr() as usize as *mut c_void;
                slot.length = s.length() as usize;
            }
            Layout {
                buf: v.as_mut_ptr().cast(),
                count: many.len(),
                datatype: ffi::UCP_DATATYPE_IOV as ffi::ucp_datatype_t,
            }
        }
    }
}
