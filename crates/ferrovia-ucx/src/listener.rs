//! Listening on a socket address (`ucp_listener_create` with a connection
//! handler, on a worker of the listener's own). Connection requests are
//! taken in by the thread that asks for the next one
//! ([`UcxListener::next_request`]): the listener has no thread. Each
//! request is accepted into a transport of its own
//! ([`UcxTransportBuilder::accept`](crate::UcxTransportBuilder::accept),
//! `ucp_ep_create` with the request, on that transport's worker) or
//! rejected (`ucp_listener_reject`; dropping it rejects it too).

use std::collections::VecDeque;
use std::ffi::c_void;
use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::null_mut;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::context::UcxContext;
use crate::error::{UcxError, addr_error, check};
use crate::ffi;
use crate::sockaddr::{RawSockAddr, as_ucs, from_storage};

/// The longest the listener sleeps on its worker's event fd before it
/// looks again (connection requests arrive through UCX's own thread,
/// which need not signal the fd).
const NAP: Duration = Duration::from_millis(5);

/// A listener on a socket address: connection requests arrive in any
/// order and each is accepted or rejected on its own.
///
/// ```no_run
/// use std::time::Duration;
/// use ferrovia_ucx::{UcxContext, UcxListener, UcxTransport};
///
/// # fn main() -> Result<(), ferrovia_ucx::UcxError> {
/// let ctx = UcxContext::new()?;
/// let listener = UcxListener::bind(&ctx, "127.0.0.1:0".parse().unwrap())?;
/// if let Some(request) = listener.next_request(Duration::from_secs(5))? {
///     let transport = UcxTransport::builder().accept(&ctx, request)?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct UcxListener {
    inner: Arc<ListenerInner>,
}

impl std::fmt::Debug for UcxListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UcxListener")
            .field("local_addr", &self.inner.local)
            .finish_non_exhaustive()
    }
}

/// The listener's UCX objects, used under its lock only.
struct Handles {
    worker: ffi::ucp_worker_h,
    listener: ffi::ucp_listener_h,
    efd: i32,
}

pub(crate) struct ListenerInner {
    handles: Mutex<Handles>,
    /// Requests the connection handler reported and nobody took yet
    /// (`ucp_conn_request_h` as addresses). Boxed: the handler's argument
    /// points to it.
    arrived: Box<Mutex<VecDeque<usize>>>,
    local: SocketAddr,
    _context: UcxContext,
}

// SAFETY: the worker (created SERIALIZED), the listener and every request
// are used under `handles`' lock only; `arrived` holds plain addresses
// behind its own lock.
unsafe impl Send for ListenerInner {}
// SAFETY: as above.
unsafe impl Sync for ListenerInner {}

impl UcxListener {
    /// Listens on `addr` (port 0: the system picks one; see
    /// [`UcxListener::local_addr`]). A port another listener holds is
    /// [`UcxError::AddrInUse`].
    pub fn bind(context: &UcxContext, addr: SocketAddr) -> Result<UcxListener, UcxError> {
        // UCX logs an error line of its own when its bind fails: find a
        // taken port first (the tcp connection manager listens on a TCP
        // socket of that address).
        if addr.port() != 0
            && let Err(e) = std::net::TcpListener::bind(addr)
            && e.kind() == std::io::ErrorKind::AddrInUse
        {
            return Err(UcxError::AddrInUse { addr });
        }
        let worker = new_worker(context)?;
        let mut handles = Handles {
            worker,
            listener: null_mut(),
            efd: -1,
        };
        let arrived: Box<Mutex<VecDeque<usize>>> = Box::default();
        // From here `Listening` destroys what exists on an error.
        let partial = Listening(&mut handles);
        let mut efd = -1;
        // SAFETY: valid worker (the context has WAKEUP) and out-pointer.
        check("ucp_worker_get_efd", unsafe {
            ffi::ucp_worker_get_efd(partial.0.worker, &mut efd)
        })?;
        partial.0.efd = efd;
        let raw = RawSockAddr::new(&addr);
        let params = ffi::ucp_listener_params_t {
            field_mask: u64::from(
                ffi::UCP_LISTENER_PARAM_FIELD_SOCK_ADDR
                    | ffi::UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
            ),
            sockaddr: as_ucs(&raw),
            conn_handler: ffi::ucp_listener_conn_handler_t {
                cb: Some(request_arrived),
                arg: std::ptr::from_ref::<Mutex<VecDeque<usize>>>(&arrived)
                    .cast_mut()
                    .cast(),
            },
            ..Default::default()
        };
        let mut listener = null_mut();
        // SAFETY: valid worker, parameters (the address lives in `raw`
        // until the call returns; UCX copies it) and out-pointer. The
        // handler's argument points into the box `arrived`, which the
        // returned listener keeps until after `ucp_listener_destroy`.
        let status = unsafe { ffi::ucp_listener_create(partial.0.worker, &params, &mut listener) };
        match status {
            ffi::UCS_OK => {}
            ffi::UCS_ERR_BUSY => return Err(UcxError::AddrInUse { addr }),
            s => return Err(addr_error("ucp_listener_create", addr, s)),
        }
        partial.0.listener = listener;
        let mut attr = ffi::ucp_listener_attr_t {
            field_mask: u64::from(ffi::UCP_LISTENER_ATTR_FIELD_SOCKADDR),
            ..Default::default()
        };
        // SAFETY: a live listener and a valid out-struct.
        let status = unsafe { ffi::ucp_listener_query(partial.0.listener, &mut attr) };
        let local = match status {
            ffi::UCS_OK => from_storage(&attr.sockaddr).unwrap_or(addr),
            _ => addr,
        };
        std::mem::forget(partial);
        log::debug!("ucx: listening on {local}");
        Ok(UcxListener {
            inner: Arc::new(ListenerInner {
                handles: Mutex::new(handles),
                arrived,
                local,
                _context: context.clone(),
            }),
        })
    }

    /// The bound address, with the port the system chose for port 0.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    /// Waits up to `timeout` for the next connection request (progressing
    /// the listener's worker meanwhile); `None` if none came.
    pub fn next_request(&self, timeout: Duration) -> Result<Option<UcxConnRequest>, UcxError> {
        let deadline = Instant::now() + timeout;
        loop {
            let efd = {
                let h = self.inner.handles.lock();
                // SAFETY: the worker is used under the lock only.
                while unsafe { ffi::ucp_worker_progress(h.worker) } != 0 {}
                if let Some(raw) = self.inner.take_arrived() {
                    return Ok(Some(UcxConnRequest::new(raw, &self.inner, &h)));
                }
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                // SAFETY: as above.
                match unsafe { ffi::ucp_worker_arm(h.worker) } {
                    ffi::UCS_OK => h.efd,
                    // Events are pending: progress again.
                    ffi::UCS_ERR_BUSY => continue,
                    s => return Err(addr_error("ucp_worker_arm", self.inner.local, s)),
                }
            };
            let left = deadline.saturating_duration_since(Instant::now()).min(NAP);
            let mut p = libc::pollfd {
                fd: efd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
            // SAFETY: one valid pollfd; the fd stays open while the
            // listener (kept alive by `self`) exists.
            unsafe { libc::poll(&mut p, 1, ms) };
        }
    }
}

impl ListenerInner {
    fn take_arrived(&self) -> Option<usize> {
        self.arrived.lock().pop_front()
    }
}

/// Destroys a half-built listener's objects on an early return.
struct Listening<'a>(&'a mut Handles);

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        destroy(self.0);
    }
}

fn destroy(h: &mut Handles) {
    if !h.listener.is_null() {
        // SAFETY: created once, destroyed once, under exclusive access.
        unsafe { ffi::ucp_listener_destroy(h.listener) };
        h.listener = null_mut();
    }
    if !h.worker.is_null() {
        // SAFETY: as above; nothing else uses the worker any more.
        unsafe { ffi::ucp_worker_destroy(h.worker) };
        h.worker = null_mut();
    }
}

impl Drop for ListenerInner {
    fn drop(&mut self) {
        let h = self.handles.get_mut();
        // Requests nobody took: rejected, so no client waits for them.
        for raw in self.arrived.get_mut().drain(..) {
            // SAFETY: a request this listener reported and nobody took
            // (taking removes it from the queue); released once.
            unsafe { ffi::ucp_listener_reject(h.listener, raw as ffi::ucp_conn_request_h) };
        }
        destroy(h);
    }
}

fn new_worker(context: &UcxContext) -> Result<ffi::ucp_worker_h, UcxError> {
    let params = ffi::ucp_worker_params_t {
        field_mask: u64::from(ffi::UCP_WORKER_PARAM_FIELD_THREAD_MODE),
        thread_mode: ffi::UCS_THREAD_MODE_SERIALIZED,
        ..Default::default()
    };
    let mut worker = null_mut();
    // SAFETY: valid context, params and out-pointer.
    check("ucp_worker_create", unsafe {
        ffi::ucp_worker_create(context.handle.raw, &params, &mut worker)
    })?;
    Ok(worker)
}

/// The connection handler: records the request for `next_request`.
///
/// # Safety
/// Only UCX calls it, as the connection handler of a listener created in
/// [`UcxListener::bind`]: `arg` points to that listener's queue, which
/// outlives the listener.
unsafe extern "C" fn request_arrived(request: ffi::ucp_conn_request_h, arg: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: by this function's contract `arg` is the listener's live
        // queue.
        let queue = unsafe { &*arg.cast::<Mutex<VecDeque<usize>>>() };
        queue.lock().push_back(request as usize);
    }));
}

/// A client's connection request: accept it into a transport
/// ([`UcxTransportBuilder::accept`](crate::UcxTransportBuilder::accept)) or
/// reject it ([`UcxConnRequest::reject`]; dropping it rejects it too, and
/// the client's endpoint fails with `UCS_ERR_REJECTED`).
pub struct UcxConnRequest {
    /// The `ucp_conn_request_h`; 0 once accepted or rejected.
    raw: usize,
    client: SocketAddr,
    arrived: Instant,
    listener: Arc<ListenerInner>,
}

impl std::fmt::Debug for UcxConnRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UcxConnRequest")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl UcxConnRequest {
    fn new(raw: usize, listener: &Arc<ListenerInner>, _locked: &Handles) -> UcxConnRequest {
        let mut attr = ffi::ucp_conn_request_attr_t {
            field_mask: u64::from(ffi::UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR),
            ..Default::default()
        };
        // SAFETY: a live request (reported and not yet released), queried
        // under the listener's lock; a valid out-struct.
        let status = unsafe { ffi::ucp_conn_request_query(raw as _, &mut attr) };
        let client = match status {
            ffi::UCS_OK => from_storage(&attr.client_address),
            _ => None,
        }
        .unwrap_or(listener.local);
        UcxConnRequest {
            raw,
            client,
            arrived: Instant::now(),
            listener: listener.clone(),
        }
    }

    /// The client's address.
    pub fn client_addr(&self) -> SocketAddr {
        self.client
    }

    /// The address the request arrived on (the listener's).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local
    }

    /// How long ago the listener took the request in.
    pub fn age(&self) -> Duration {
        self.arrived.elapsed()
    }

    /// Rejects the request: the client's endpoint fails with
    /// `UCS_ERR_REJECTED`.
    pub fn reject(mut self) {
        self.release();
    }

    fn release(&mut self) {
        if self.raw == 0 {
            return;
        }
        let h = self.listener.handles.lock();
        // SAFETY: a live request of this listener, released once (`raw`
        // is cleared), under the listener's lock.
        unsafe { ffi::ucp_listener_reject(h.listener, self.raw as _) };
        self.raw = 0;
    }

    /// Hands the raw request to `f` (which must release it, by
    /// `ucp_ep_create`) while the listener's worker is locked, so no other
    /// thread progresses it meanwhile.
    pub(crate) fn consume<R>(mut self, f: impl FnOnce(ffi::ucp_conn_request_h) -> R) -> R {
        let raw = std::mem::replace(&mut self.raw, 0);
        let _h = self.listener.handles.lock();
        f(raw as ffi::ucp_conn_request_h)
    }
}

impl Drop for UcxConnRequest {
    fn drop(&mut self) {
        self.release();
    }
}
