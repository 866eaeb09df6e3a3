//! Memory: registrations (`ucp_mem_map`, [`MemMap`]) with their packed
//! keys, and the remote keys a peer's packed key unpacks to ([`Rkey`]).

use std::ffi::c_void;
use std::ptr::{NonNull, null_mut};
use std::sync::Arc;

use super::context::Context;
use super::endpoint::Ep;
use super::ffi;
use super::handle;
use super::status::{Status, check};
use crate::error::UcxError;

/// A `ucp_mem_map` of memory on a context, unmapped when it drops (a
/// failure to unmap is logged).
pub(crate) struct MemMap {
    raw: ffi::ucp_mem_h,
    ctx: Arc<Context>,
}

// SAFETY: the handle is only passed to `ucp_rkey_pack`, `ucp_mem_query`
// and `ucp_mem_unmap` on a context created with `mt_workers_shared` (UCX
// locks it).
unsafe impl Send for MemMap {}
// SAFETY: as above; `&MemMap` only packs and queries.
unsafe impl Sync for MemMap {}

impl Drop for MemMap {
    fn drop(&mut self) {
        // SAFETY: mapped once by `map` or `allocate`, unmapped once here;
        // the context lives (`Arc`).
        let status = Status(unsafe { ffi::ucp_mem_unmap(self.ctx.raw(), self.raw) });
        if let Err(e) = check("ucp_mem_unmap", status) {
            tracing::warn!("{e}");
        }
    }
}

impl MemMap {
    /// `ucp_mem_map` of `len` bytes at `addr`.
    ///
    /// # Safety
    /// The `len` bytes at `addr` stay allocated until the map drops.
    pub(crate) unsafe fn map(
        ctx: &Arc<Context>,
        addr: *mut u8,
        len: usize,
    ) -> Result<MemMap, UcxError> {
        let params = ffi::ucp_mem_map_params_t {
            field_mask: u64::from(
                ffi::UCP_MEM_MAP_PARAM_FIELD_ADDRESS | ffi::UCP_MEM_MAP_PARAM_FIELD_LENGTH,
            ),
            address: addr.cast::<c_void>(),
            length: len,
            ..Default::default()
        };
        let mut memh = null_mut();
        // SAFETY: the caller keeps `len` bytes at `addr` allocated while
        // the map exists; the context outlives it (`Arc`).
        let status = Status(unsafe { ffi::ucp_mem_map(ctx.raw(), &params, &mut memh) });
        check("ucp_mem_map", status)?;
        Ok(MemMap {
            raw: memh,
            ctx: ctx.clone(),
        })
    }

    /// `ucp_mem_map(ALLOCATE)` of `len` bytes: memory UCX places where its
    /// transports reach it fastest (shared memory on this host), freed
    /// when the map drops. Where it is: [`MemMap::query`].
    pub(crate) fn allocate(ctx: &Arc<Context>, len: usize) -> Result<MemMap, UcxError> {
        let params = ffi::ucp_mem_map_params_t {
            field_mask: u64::from(
                ffi::UCP_MEM_MAP_PARAM_FIELD_LENGTH | ffi::UCP_MEM_MAP_PARAM_FIELD_FLAGS,
            ),
            length: len,
            flags: ffi::UCP_MEM_MAP_ALLOCATE,
            ..Default::default()
        };
        let mut memh = null_mut();
        // SAFETY: valid context, params and out-pointer.
        let status = Status(unsafe { ffi::ucp_mem_map(ctx.raw(), &params, &mut memh) });
        check("ucp_mem_map", status)?;
        Ok(MemMap {
            raw: memh,
            ctx: ctx.clone(),
        })
    }

    /// Where the mapped memory is and how long (`ucp_mem_query`).
    pub(crate) fn query(&self) -> Result<(*mut u8, usize), UcxError> {
        let mut attr = ffi::ucp_mem_attr_t {
            field_mask: u64::from(ffi::UCP_MEM_ATTR_FIELD_ADDRESS | ffi::UCP_MEM_ATTR_FIELD_LENGTH),
            ..Default::default()
        };
        // SAFETY: a mapped handle; `attr` is a valid out-pointer.
        let status = Status(unsafe { ffi::ucp_mem_query(self.raw, &mut attr) });
        check("ucp_mem_query", status)?;
        Ok((attr.address.cast::<u8>(), attr.length))
    }

    /// The packed key (`ucp_rkey_pack`) a peer unpacks to access it.
    pub(crate) fn pack(&self) -> Result<Vec<u8>, UcxError> {
        let mut buf = null_mut();
        let mut size = 0usize;
        // SAFETY: the handle is mapped on this context.
        let status =
            Status(unsafe { ffi::ucp_rkey_pack(self.ctx.raw(), self.raw, &mut buf, &mut size) });
        check("ucp_rkey_pack", status)?;
        // SAFETY: UCX returned `size` readable bytes at `buf`; released once
        // after copying.
        let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), size) }.to_vec();
        // SAFETY: as above.
        unsafe { ffi::ucp_rkey_buffer_release(buf) };
        Ok(bytes)
    }
}

/// A peer's remote key unpacked on an endpoint (`ucp_rkey_h`), copied
/// freely; destroyed explicitly, once, after its last use.
#[derive(Clone, Copy)]
pub(crate) struct Rkey(NonNull<ffi::ucp_rkey>);

impl Rkey {
    #[inline]
    pub(super) fn raw(self) -> ffi::ucp_rkey_h {
        self.0.as_ptr()
    }

    /// `ucp_ep_rkey_unpack` of a peer's packed key on `ep`.
    ///
    /// # Safety
    /// See [`Ep`]: a live endpoint of a worker used by one thread at a
    /// time.
    pub(crate) unsafe fn unpack(ep: Ep, packed: &[u8]) -> Result<Rkey, UcxError> {
        let mut rkey = null_mut();
        // SAFETY: live endpoint (the caller's contract); UCX validates the
        // packed bytes and copies what it needs.
        let status =
            Status(unsafe { ffi::ucp_ep_rkey_unpack(ep.raw(), packed.as_ptr().cast(), &mut rkey) });
        check("ucp_ep_rkey_unpack", status)?;
        Ok(Rkey(handle(rkey, "ucp_ep_rkey_unpack")))
    }

    /// Where the peer's `len` bytes at its address `raddr` are mapped in
    /// this process (`ucp_rkey_ptr`), if they are: the key's transport
    /// attached the peer's segment (shared memory on this host). `None`
    /// where no transport of the key maps it (another host, or memory UCX
    /// did not allocate), or the range's first and last bytes are not
    /// `len - 1` apart in this process (no single mapping holds it).
    ///
    /// # Safety
    /// The key is live (not destroyed).
    pub(crate) unsafe fn mapped(self, raddr: u64, len: u64) -> Option<NonNull<u8>> {
        let last = raddr.checked_add(len.checked_sub(1)?)?;
        let at = |a: u64| {
            let mut p = null_mut();
            // SAFETY: a live key (the caller's contract); `p` is a valid
            // out-pointer. UCX only computes an address: nothing is read.
            let status = Status(unsafe { ffi::ucp_rkey_ptr(self.raw(), a, &mut p) });
            (status == Status::OK).then_some(p.cast::<u8>())
        };
        let (first, end) = (at(raddr)?, at(last)?);
        let span = usize::try_from(len - 1).ok()?;
        (end as usize)
            .checked_sub(first as usize)
            .filter(|&d| d == span)?;
        NonNull::new(first)
    }

    /// `ucp_rkey_destroy`.
    ///
    /// # Safety
    /// Destroyed once, after its last use: no operation with it is
    /// outstanding, and none is issued afterwards.
    pub(crate) unsafe fn destroy(self) {
        // SAFETY: the caller's contract.
        unsafe { ffi::ucp_rkey_destroy(self.raw()) };
    }
}
