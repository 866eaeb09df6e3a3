//! A communication identifier (`struct rdma_cm_id`) on its own event
//! channel, and the librdmacm calls made on it.
//!
//! Every id ferrovia keeps has a channel of its own (a connection request's
//! new id is migrated off the listener's channel at once), so an event read
//! from an id's channel is always that id's, and no reader steals another
//! connection's events.

use std::ffi::CStr;
use std::net::SocketAddr;
use std::ptr::{NonNull, null_mut};
use std::sync::Arc;

use ferrovia_sys as sys;

use crate::cm::addr::{RawSockAddr, read_sockaddr, sockaddr_ptr};
use crate::cm::channel::EventChannel;
use crate::cm::error::{CmError, CmResult, call_error, check_call, cm_lib, cm_loaded};

/// An id and the channel its events arrive on. Dropping it destroys the
/// id (which disconnects or rejects whatever it still had in progress),
/// then releases the channel.
pub(crate) struct CmId {
    raw: NonNull<sys::rdma_cm_id>,
    channel: Arc<EventChannel>,
}

// SAFETY: librdmacm's calls on an id are thread-safe (the library locks
// its private state, the kernel serialises commands per id); ferrovia
// only reads fields librdmacm sets during calls that take `&mut self` or
// that finished before the id was shared (addresses, device, port).
unsafe impl Send for CmId {}
// SAFETY: as above.
unsafe impl Sync for CmId {}

impl Drop for CmId {
    fn drop(&mut self) {
        if let Some(l) = cm_loaded() {
            // SAFETY: the id is destroyed once, here; every event read for
            // it was acknowledged when read (so this does not block), and
            // its channel outlives it (the Arc field drops after this).
            unsafe { l.rdma_destroy_id(self.raw.as_ptr()) };
        }
    }
}

impl CmId {
    /// A new id (TCP port space: reliable connections) on a new channel.
    pub(crate) fn new(addr: SocketAddr) -> CmResult<CmId> {
        let channel = Arc::new(EventChannel::new(addr)?);
        let mut raw = null_mut();
        // SAFETY: a live channel (kept alive by the id below) and an
        // out-pointer; no user context.
        let ret = unsafe {
            cm_lib()?.rdma_create_id(
                channel.as_ptr(),
                &mut raw,
                null_mut(),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        };
        check_call("rdma_create_id", addr, ret)?;
        let raw = NonNull::new(raw).ok_or_else(|| call_error("rdma_create_id", addr))?;
        Ok(CmId { raw, channel })
    }

    /// Takes ownership of a connection request's new id, moving it off the
    /// listener's channel onto a channel of its own. On failure the id is
    /// destroyed (which rejects the request).
    ///
    /// # Safety
    /// `raw` must be the new id of a `RDMA_CM_EVENT_CONNECT_REQUEST` just
    /// read (and acknowledged) from a channel that is still alive, owned
    /// by nobody else.
    pub(crate) unsafe fn adopt(raw: *mut sys::rdma_cm_id, addr: SocketAddr) -> CmResult<CmId> {
        let lib = cm_lib()?;
        let raw = NonNull::new(raw).ok_or(CmError::Call {
            call: "rdma_get_cm_event (connect request without an id)",
            addr,
            errno: libc::EIO,
        })?;
        let destroy = |e: CmError| {
            // SAFETY: the id is ours (our caller's contract) and has no
            // unacknowledged event, so destroying it rejects the request.
            unsafe { lib.rdma_destroy_id(raw.as_ptr()) };
            e
        };
        let channel = Arc::new(EventChannel::new(addr).map_err(destroy)?);
        // SAFETY: a live id with no unacknowledged event of its own (the
        // connect request is counted on the listening id), and a live
        // channel the id keeps alive from now on.
        let ret = unsafe { lib.rdma_migrate_id(raw.as_ptr(), channel.as_ptr()) };
        check_call("rdma_migrate_id", addr, ret).map_err(destroy)?;
        Ok(CmId { raw, channel })
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::rdma_cm_id {
        self.raw.as_ptr()
    }

    pub(crate) fn channel(&self) -> &EventChannel {
        &self.channel
    }

    /// The local address (after bind, resolution or a connect request).
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: `route.addr` is a union of sockaddr_storage-sized members
        // inside the live id; librdmacm fills it during calls that have
        // returned.
        unsafe {
            let id = self.raw.as_ptr();
            read_sockaddr(&raw const (*id).route.addr.__bindgen_anon_1.src_addr)
        }
    }

    /// The peer's address (after resolution or a connect request).
    pub(crate) fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as for `local_addr`, the destination member.
        unsafe {
            let id = self.raw.as_ptr();
            read_sockaddr(&raw const (*id).route.addr.__bindgen_anon_2.dst_addr)
        }
    }

    /// The RDMA device the id is bound to, if it is bound to one yet.
    pub(crate) fn device_name(&self) -> Option<String> {
        // SAFETY: `verbs` is NULL or the library's open context for the
        // id's device, which stays open while the id exists.
        let ctx = unsafe { (*self.raw.as_ptr()).verbs };
        if ctx.is_null() {
            return None;
        }
        // SAFETY: a live context's `device` points to its device, whose
        // name is a NUL-terminated array that never changes.
        let name = unsafe { CStr::from_ptr((*(*ctx).device).name.as_ptr()) };
        Some(name.to_string_lossy().into_owned())
    }

    /// The port the id is bound to (0 before it is bound).
    pub(crate) fn port_num(&self) -> u8 {
        // SAFETY: a plain field of the live id, set by librdmacm during
        // calls that have returned.
        unsafe { (*self.raw.as_ptr()).port_num }
    }

    pub(crate) fn bind(&mut self, addr: SocketAddr) -> CmResult<()> {
        let sa = RawSockAddr::new(&addr);
        // SAFETY: a live id we own exclusively and an address it copies.
        let ret = unsafe { cm_lib()?.rdma_bind_addr(self.as_ptr(), sockaddr_ptr(&sa)) };
        check_call("rdma_bind_addr", addr, ret)
    }

    pub(crate) fn listen(&mut self, addr: SocketAddr, backlog: i32) -> CmResult<()> {
        // SAFETY: a live, bound id we own exclusively.
        let ret = unsafe { cm_lib()?.rdma_listen(self.as_ptr(), backlog) };
        check_call("rdma_listen", addr, ret)
    }

    /// Starts resolving `dst` (from `src` if given): the answer is an
    /// `ADDR_RESOLVED` or `ADDR_ERROR` event.
    pub(crate) fn resolve_addr(
        &mut self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: i32,
    ) -> CmResult<()> {
        let src = src.map(|s| RawSockAddr::new(&s));
        let dst_raw = RawSockAddr::new(&dst);
        let src_ptr = src.as_ref().map_or(null_mut(), sockaddr_ptr);
        // SAFETY: a live id we own exclusively; the addresses are copied
        // during the call.
        let ret = unsafe {
            cm_lib()?.rdma_resolve_addr(self.as_ptr(), src_ptr, sockaddr_ptr(&dst_raw), timeout_ms)
        };
        if ret == 0 {
            return Ok(());
        }
        Err(CmError::AddressResolution {
            addr: dst,
            errno: crate::error::last_errno().unwrap_or(libc::EIO),
        })
    }

    /// Starts resolving the route: a `ROUTE_RESOLVED` or `ROUTE_ERROR`
    /// event answers.
    pub(crate) fn resolve_route(&mut self, addr: SocketAddr, timeout_ms: i32) -> CmResult<()> {
        // SAFETY: a live id with a resolved address, owned exclusively.
        let ret = unsafe { cm_lib()?.rdma_resolve_route(self.as_ptr(), timeout_ms) };
        if ret == 0 {
            return Ok(());
        }
        Err(CmError::RouteResolution {
            addr,
            errno: crate::error::last_errno().unwrap_or(libc::EIO),
        })
    }

    /// `rdma_connect`. `param.private_data` must point to
    /// `param.private_data_len` readable bytes for the call.
    pub(crate) fn connect(
        &mut self,
        addr: SocketAddr,
        param: &mut sys::rdma_conn_param,
    ) -> CmResult<()> {
        // SAFETY: a live id with a resolved route; `param` is valid and its
        // private data readable (our caller's contract), copied in the call.
        let ret = unsafe { cm_lib()?.rdma_connect(self.as_ptr(), param) };
        check_call("rdma_connect", addr, ret)
    }

    /// `rdma_accept`, with the same contract as [`CmId::connect`].
    pub(crate) fn accept(
        &mut self,
        addr: SocketAddr,
        param: &mut sys::rdma_conn_param,
    ) -> CmResult<()> {
        // SAFETY: a live id of a connection request; `param` as in connect.
        let ret = unsafe { cm_lib()?.rdma_accept(self.as_ptr(), param) };
        check_call("rdma_accept", addr, ret)
    }

    /// `rdma_reject` with `data` (at most 255 bytes; the caller checks the
    /// transport's smaller limit).
    pub(crate) fn reject(&mut self, addr: SocketAddr, data: &[u8]) -> CmResult<()> {
        let len = u8::try_from(data.len()).unwrap_or(u8::MAX);
        let ptr = if data.is_empty() {
            std::ptr::null()
        } else {
            data.as_ptr().cast()
        };
        // SAFETY: a live id of a connection request; `len` bytes at `ptr`
        // are readable for the call, which copies them.
        let ret = unsafe { cm_lib()?.rdma_reject(self.as_ptr(), ptr, len) };
        check_call("rdma_reject", addr, ret)
    }

    /// `rdma_establish`: the active side's last step when it drives its own
    /// QP (sends the RTU).
    pub(crate) fn establish(&mut self, addr: SocketAddr) -> CmResult<()> {
        // SAFETY: a live id that received a connect response.
        let ret = unsafe { cm_lib()?.rdma_establish(self.as_ptr()) };
        check_call("rdma_establish", addr, ret)
    }

    /// `rdma_disconnect`. Safe to call from any thread while another waits
    /// for events.
    pub(crate) fn disconnect(&self, addr: SocketAddr) -> CmResult<()> {
        // SAFETY: a live id; librdmacm does not touch a QP here (ferrovia
        // never attaches one to the id).
        let ret = unsafe { cm_lib()?.rdma_disconnect(self.as_ptr()) };
        check_call("rdma_disconnect", addr, ret)
    }

    /// The QP attributes for moving to `state`, from the connection
    /// manager's view of the connection (`rdma_init_qp_attr`).
    pub(crate) fn qp_attr(
        &self,
        addr: SocketAddr,
        state: sys::ibv_qp_state,
    ) -> CmResult<(sys::ibv_qp_attr, u32)> {
        let mut attr = sys::ibv_qp_attr {
            qp_state: state,
            ..Default::default()
        };
        let mut mask = 0;
        // SAFETY: a live id and two out-pointers the library fills.
        let ret = unsafe { cm_lib()?.rdma_init_qp_attr(self.as_ptr(), &mut attr, &mut mask) };
        check_call("rdma_init_qp_attr", addr, ret)?;
        Ok((attr, u32::try_from(mask).unwrap_or(0)))
    }
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmId")
            .field("local", &self.local_addr())
            .field("peer", &self.peer_addr())
            .field("device", &self.device_name())
            .field("port", &self.port_num())
            .finish()
    }
}
