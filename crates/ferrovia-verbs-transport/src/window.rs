//! Memory windows over registrations: a grant to one peer of fewer
//! rights, or a narrower range, than the registration has, revoked by
//! invalidating the window (one work request) instead of deregistering.
//!
//! Windows are type 2: bound by a work request on the queue pair of the
//! peer they are for, and reachable only through that queue pair. A
//! window grants at most the registration's own remote rights (a
//! [`Local`](ferrovia_mr::Local) registration has no remote write, so no
//! window makes it writable by peers), and holds the registration, so its
//! memory outlives every access through the window.

use std::ops::Range;
use std::time::{Duration, Instant};

use ferrovia_channel::{Channel, MultiChannel, TransportError, TransportResult};
use ferrovia_mr::{MrError, Registration, RemoteMemoryRegion};
use ferrovia_types::{AccessFlags, CompletionError};
use ferrovia_verbs::{MemoryWindow, SendWr};

use crate::connect::VerbsMultiChannel;
use crate::error::from_verbs;
use crate::registrar::VerbsKeys;
use crate::transport::VerbsTransport;

/// A memory window bound for one peer (type 2). The peer reaches the
/// window's range with its rights through [`Window::remote`]'s
/// descriptor, until the window is invalidated
/// ([`VerbsWindows::invalidate_window`]) or dropped (deallocating it
/// revokes it too).
pub struct Window<'a> {
    // Field order: the window is deallocated before the registration it
    // covers can go.
    /// `None` once deallocated (which revokes it wherever it was bound).
    mw: Option<MemoryWindow>,
    peer: usize,
    /// The queue pair it was bound on (a renewed connection has another).
    qp_num: u32,
    /// The protection domain of the transport it was bound through: a
    /// window handed to another transport's `invalidate_window` is not
    /// one of its windows.
    pd: usize,
    remote: Option<RemoteMemoryRegion>,
    _reg: Registration<'a>,
}

impl Window<'_> {
    /// What the peer needs to reach the window: its RDMA address, length,
    /// the window's rkey and its rights. Refused once invalidated.
    pub fn remote(&self) -> Result<RemoteMemoryRegion, MrError> {
        self.remote.ok_or(MrError::AccessNotGranted {
            what: "an invalidated memory window",
            needed: "a bound window",
        })
    }

    /// The peer the window is for.
    pub fn peer(&self) -> usize {
        self.peer
    }

    /// Whether the window is bound (not invalidated).
    pub fn is_bound(&self) -> bool {
        self.remote.is_some()
    }
}

impl std::fmt::Debug for Window<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("peer", &self.peer)
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

/// Memory windows on a verbs channel (extension methods of
/// [`MultiChannel`] and [`Channel`]). Called with no scope open (they
/// take `&self`, a scope `&mut`); each posts one request on the peer's
/// queue pair and turns the channel until it completes.
pub trait VerbsWindows {
    /// Binds a window over `range` (byte offsets) of `reg` for `peer`,
    /// granting `rights` (remote read, write, atomics: at most `reg`'s
    /// own; `reg` needs [`allow_memory_windows`](ferrovia_mr::RegisterOptions::allow_memory_windows)).
    /// A device without type 2 windows is a typed refusal naming it (and
    /// nothing is left allocated); a bind that does not complete within
    /// `timeout` flushes the peer's connection.
    fn bind_window<'a>(
        &self,
        peer: usize,
        reg: &Registration<'a>,
        range: Range<usize>,
        rights: AccessFlags,
        timeout: Duration,
    ) -> TransportResult<Window<'a>>;

    /// Invalidates `window` (a local invalidate on the peer's queue pair):
    /// once this returns, an access with its rkey fails with
    /// `IBV_WC_REM_ACCESS_ERR` and touches nothing. Invalidating an
    /// invalidated window does nothing.
    fn invalidate_window(&self, window: &mut Window<'_>, timeout: Duration) -> TransportResult<()>;
}

impl VerbsWindows for MultiChannel {
    fn bind_window<'a>(
        &self,
        peer: usize,
        reg: &Registration<'a>,
        range: Range<usize>,
        rights: AccessFlags,
        timeout: Duration,
    ) -> TransportResult<Window<'a>> {
        let t = self.verbs()?;
        let mr = &reg
            .keys_as::<VerbsKeys>()
            .ok_or_else(|| {
                TransportError::Config("a memory window needs a verbs registration".into())
            })?
            .0;
        if mr.pd().as_raw() != t.pd().as_raw() {
            return Err(TransportError::Config(
                "the registration is in another protection domain than the channel".into(),
            ));
        }
        check_rights(reg.access(), rights)?;
        let view = reg.view_at(range.start, range.len())?;
        let mut mw = MemoryWindow::alloc_type2(t.pd()).map_err(from_verbs)?;
        let rkey = mw.next_rkey();
        let len = view.size as u64;
        let qp_num = t.qp(peer)?.qp_num();
        let wr = |id| SendWr::bind_window(id, &mw, rkey, mr, view.rdma_addr as u64, len, rights);
        run(self, t, peer, wr, timeout)?;
        mw.record_rkey(rkey);
        let remote = RemoteMemoryRegion::new(view.rdma_addr as u64, len, rkey)?.restrict(rights);
        Ok(Window {
            mw: Some(mw),
            peer,
            qp_num,
            pd: t.pd().as_raw() as usize,
            remote: Some(remote),
            _reg: reg.clone(),
        })
    }

    fn invalidate_window(&self, window: &mut Window<'_>, timeout: Duration) -> TransportResult<()> {
        if window.remote.is_none() {
            return Ok(());
        }
        let t = self.verbs()?;
        // Invalidated through the queue pair it was bound on, if that is
        // still this transport's QP for the peer. Otherwise (the
        // connection was renewed, and a new QP may even have the old
        // number; or the window is another transport's) it is deallocated,
        // which revokes it wherever it was bound.
        let ours =
            window.pd == t.pd().as_raw() as usize && t.qp(window.peer)?.qp_num() == window.qp_num;
        match &window.mw {
            Some(mw) if ours => {
                let rkey = mw.rkey();
                run(
                    self,
                    t,
                    window.peer,
                    |id| SendWr::local_invalidate(id, rkey),
                    timeout,
                )?;
            }
            _ => drop(window.mw.take()),
        }
        window.remote = None;
        Ok(())
    }
}

impl VerbsWindows for Channel {
    fn bind_window<'a>(
        &self,
        peer: usize,
        reg: &Registration<'a>,
        range: Range<usize>,
        rights: AccessFlags,
        timeout: Duration,
    ) -> TransportResult<Window<'a>> {
        self.as_multi()
            .bind_window(peer, reg, range, rights, timeout)
    }

    fn invalidate_window(&self, window: &mut Window<'_>, timeout: Duration) -> TransportResult<()> {
        self.as_multi().invalidate_window(window, timeout)
    }
}

/// `rights` must be remote rights the registration grants, and the
/// registration must allow windows.
fn check_rights(granted: AccessFlags, rights: AccessFlags) -> Result<(), MrError> {
    let missing = |needed| MrError::AccessNotGranted {
        what: "a memory window",
        needed,
    };
    if !granted.contains(AccessFlags::MW_BIND) {
        return Err(missing("MW_BIND (RegisterOptions::allow_memory_windows)"));
    }
    if !AccessFlags::REMOTE_ANY.contains(rights) || !rights.grants_remote() {
        return Err(missing(
            "remote rights only: REMOTE_READ, REMOTE_WRITE or REMOTE_ATOMIC",
        ));
    }
    for (right, name) in [
        (AccessFlags::REMOTE_READ, "REMOTE_READ"),
        (AccessFlags::REMOTE_WRITE, "REMOTE_WRITE"),
        (AccessFlags::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
    ] {
        if rights.contains(right) && !granted.contains(right) {
            return Err(missing(name));
        }
    }
    Ok(())
}

/// Posts the internal request `wr` (given its `wr_id`) on `peer`'s queue
/// pair and turns `multi` until it completes, up to `timeout`; past it,
/// flushes the peer (so the request completes and touches nothing more).
fn run<'w>(
    multi: &MultiChannel,
    t: &VerbsTransport,
    peer: usize,
    wr: impl FnOnce(u64) -> SendWr<'w>,
    timeout: Duration,
) -> TransportResult<()> {
    let _turn = t.internal.turn();
    let id = t.internal.begin();
    let qp = match t.qp(peer) {
        Ok(qp) => qp,
        Err(e) => {
            t.internal.abandon();
            return Err(e);
        }
    };
    let mut wr = wr(id);
    // SAFETY: a bind or an invalidate names no SGE memory; the window and
    // the region a bind names live until its completion is taken below
    // (the caller holds both), or past a flush that completes it.
    if let Err(e) = unsafe { qp.post_send(&mut wr) } {
        t.internal.abandon();
        return Err(from_verbs(e));
    }
    drop(qp);
    let start = Instant::now();
    loop {
        if let Some(c) = t.internal.take(id) {
            if c.status.is_success() {
                return Ok(());
            }
            return Err(TransportError::Completion(
                CompletionError::new(id, c.status, c.vendor_err).with_peer(peer),
            ));
        }
        if start.elapsed() >= timeout {
            break;
        }
        if multi.progress()? == 0 {
            std::thread::yield_now();
        }
    }
    // The request is still posted: flush the connection, then wait
    // (bounded) for its flush completion so it names nothing any more.
    tracing::warn!("a memory-window request to peer {peer} took longer than {timeout:?}: flushing");
    t.qp(peer)?.to_error().map_err(from_verbs)?;
    let flushed = Instant::now();
    while t.internal.take(id).is_none() && flushed.elapsed() < Duration::from_secs(5) {
        multi.progress()?;
    }
    Err(TransportError::Config(format!(
        "a memory-window request to peer {peer} did not complete within {timeout:?}; the connection was flushed"
    )))
}
