//! [`VerbsTransport`]: the verbs implementation of the channel's transport
//! seam, RC queue pairs sharing one completion queue. Its `unsafe` is the
//! `Transport` implementation and the verbs posts under it; `qp_table`'s
//! reclamation and `registrar`'s promises are this crate's only other.

use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ferrovia_channel::transport::{Completion, OpKind, RecvOp, SendOp, SharedFlush, Transport};
use ferrovia_channel::{ChannelConfig, TransportError, TransportResult};
use ferrovia_verbs::{
    AsyncEvent, CompletionQueue, ConnectOptions, CqOptions, Endpoint, PostPath, ProtectionDomain,
    QpCaps, QueuePair, RecvWr, SendWr, Sge, SharedReceiveQueue, VerbsError, WorkCompletion,
};

use crate::cm_watch::LinkWatch;
use crate::config::VerbsConfig;
use crate::error::from_verbs;
use crate::internal::InternalOps;
use crate::qp_table::{QpRef, QpTable};
use crate::shared_pool::{LAST_WQE_WAIT, SharedPool};

/// How many work requests are linked into one doorbell at most.
const CHUNK: usize = 16;
/// Completions taken per poll.
const POLL_BATCH: usize = 32;

/// Verbs RC queue pairs, one per peer, sharing a PD and a CQ.
///
/// The CQ is the transport's own: no other queue pair can post to it, so
/// every completion it reports is one of this transport's requests. The
/// queue pairs are connected by exchanging endpoints
/// ([`VerbsMultiChannel::connect`](crate::VerbsMultiChannel::connect)), or by the
/// connection manager: take a peer's QP with [`VerbsTransport::qp`] to
/// `ready_qp` and `connect_qp` / `accept_qp` it (`ferrovia_verbs::cm`),
/// then hand its [`CmLink`](ferrovia_verbs::cm::CmLink) to
/// [`VerbsTransport::watch`]: the peer's disconnect then flushes its QP,
/// so its pending work fails at once, naming its address
/// ([`TransportError::Disconnected`]).
///
/// As a [`Transport`] it also renews a peer's connection
/// ([`Transport::renew`]: a fresh QP, its [`Endpoint`] postcard-encoded;
/// [`Transport::connect_renewed`]: the peer's, decoded and connected), so a
/// [`MultiChannel::over`](ferrovia_channel::MultiChannel::over) this transport
/// reconnects through
/// [`MultiChannel::renew`](ferrovia_channel::MultiChannel::renew)
/// and [`MultiChannel::connect_renewed`](ferrovia_channel::MultiChannel::connect_renewed)
/// as one over UCX does.
pub struct VerbsTransport {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qps: QpTable,
    /// What every QP is built with (a renewed one too).
    caps: QpCaps,
    port: Option<u8>,
    /// How every QP is posted to (a renewed one too).
    post_path: PostPath,
    /// What every QP is connected with (a renewed one too).
    connect: ConnectOptions,
    /// Whether the device runs remote atomics (`atomic_cap`).
    atomics: bool,
    /// The shared receive pool, when the channel has one.
    shared: Option<SharedPool>,
    /// The connection manager's links of peers connected by address.
    links: LinkWatch,
    /// The transport's own requests (memory windows).
    pub(crate) internal: InternalOps,
}

impl VerbsTransport {
    /// `peers` RC queue pairs in `pd`, on a new CQ (and shared receive
    /// queue, with `channel.shared_receives`), with `channel`'s depths and
    /// `verbs`' other caps on `verbs.port` (default: the first active
    /// port), not connected yet. [`VerbsBuilder`](crate::VerbsBuilder)
    /// opens the device and builds one.
    pub fn new(
        pd: &ProtectionDomain,
        peers: usize,
        channel: &ChannelConfig,
        verbs: &VerbsConfig,
    ) -> TransportResult<Self> {
        if peers == 0 {
            return Err(TransportError::Config(
                "a channel needs at least one peer".into(),
            ));
        }
        let caps = verbs.caps(channel);
        let ctx = pd.context();
        let pool = channel.shared_receives;
        // With a pool, the QPs have no receive queues of their own.
        let per_peer_recv = if pool > 0 { 0 } else { caps.max_recv_wr };
        let per_peer = caps.max_send_wr + per_peer_recv;
        let depth = per_peer
            .checked_mul(peers as u32)
            .and_then(|d| d.checked_add(pool))
            .ok_or_else(|| {
                TransportError::Config(format!(
                    "{peers} peers × {per_peer} entries + {pool} shared receives overflow a CQ"
                ))
            })?;
        let cq_opts = CqOptions::default()
            .channel(true)
            .poll_path(verbs.poll_path);
        let cq = CompletionQueue::with_options(&ctx, depth, &cq_opts).map_err(from_verbs)?;
        let srq = match pool {
            0 => None,
            n => Some(SharedReceiveQueue::new(pd, n, caps.max_recv_sge).map_err(from_verbs)?),
        };
        let qps = (0..peers)
            .map(|_| new_qp(pd, &cq, srq.as_ref(), caps, verbs.port, verbs.post_path))
            .collect::<TransportResult<Vec<_>>>()?;
        let atomics = ctx
            .query_device()
            .map_err(from_verbs)?
            .atomic_cap
            .supported();
        let shared = srq.map(|srq| {
            let mut peer_of_qpn: Vec<(u32, u32)> = qps
                .iter()
                .enumerate()
                .map(|(p, qp)| (qp.qp_num(), p as u32))
                .collect();
            peer_of_qpn.sort_unstable();
            SharedPool {
                srq,
                ctx: ctx.clone(),
                peer_of_qpn: RwLock::new(peer_of_qpn),
                limit_hit: AtomicBool::new(false),
                flushed: AtomicBool::new(false),
            }
        });
        Ok(VerbsTransport {
            pd: pd.clone(),
            cq,
            qps: QpTable::new(qps),
            caps,
            port: verbs.port,
            post_path: verbs.post_path,
            connect: verbs.connect,
            atomics,
            shared,
            links: LinkWatch::new(peers),
            internal: InternalOps::default(),
        })
    }

    /// Watches `peer`'s connection-manager link (a connection made by
    /// address): its `DISCONNECTED` flushes the peer's QP. Once per peer.
    pub fn watch(&mut self, peer: usize, link: ferrovia_verbs::cm::CmLink) -> TransportResult<()> {
        self.links.set(peer, link).map_err(TransportError::Config)
    }

    /// The protection domain of every queue pair.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// Reads the links' events; flushes the QPs of peers that left.
    fn check_links(&self) {
        self.links.check(|peer| self.flush_gone(peer));
    }

    fn flush_gone(&self, peer: usize) {
        if let Some(qp) = self.qps.get(peer)
            && let Err(e) = qp.to_error()
        {
            tracing::warn!("flushing peer {peer}'s queue pair: {e}");
        }
    }

    /// Stops `peer`'s QP, whatever its state (so the peer's old side sees
    /// this end gone), and replaces it by a fresh one on the same CQ (and
    /// pool), not yet connected; returns its endpoint. The old one must
    /// have nothing outstanding (the caller's scope drained it).
    pub(crate) fn renew_qp(&self, peer: usize) -> TransportResult<Endpoint> {
        if self.links.has(peer) {
            return Err(TransportError::Config(format!(
                "peer {peer} was connected by address: connect again instead of renewing"
            )));
        }
        if self
            .shared
            .as_ref()
            .is_some_and(|p| p.flushed.load(Ordering::Relaxed))
        {
            return Err(TransportError::SharedPoolFlushed);
        }
        self.qp(peer)?.to_error().map_err(from_verbs)?;
        let qp = new_qp(
            &self.pd,
            &self.cq,
            self.shared.as_ref().map(|p| &p.srq),
            self.caps,
            self.port,
            self.post_path,
        )?;
        // The core sized its bookkeeping by the first QP's granted caps.
        let (old, new) = (self.qp(peer)?.caps(), qp.caps());
        if new.max_send_wr < old.max_send_wr
            || new.max_recv_wr < old.max_recv_wr
            || new.max_inline_data < old.max_inline_data
        {
            return Err(TransportError::Config(format!(
                "the device granted peer {peer}'s new QP smaller queues ({new:?}) than its first ({old:?})"
            )));
        }
        if let Some(pool) = &self.shared {
            let mut map = pool.peer_of_qpn.write().unwrap_or_else(|e| e.into_inner());
            map.retain(|&(_, p)| p as usize != peer);
            map.push((qp.qp_num(), peer as u32));
            map.sort_unstable();
        }
        let endpoint = qp.endpoint();
        self.qps.replace(peer, qp);
        Ok(endpoint)
    }

    fn pool(&self) -> TransportResult<&SharedPool> {
        self.shared.as_ref().ok_or(TransportError::NoSharedPool)
    }

    /// Names the sender of every completion (only a pool needs it: the
    /// core knows the peer of every other request).
    fn name_senders(&self, out: &mut [Completion], wcs: &[WorkCompletion]) {
        if let Some(pool) = &self.shared {
            let map = pool.peer_of_qpn.read().unwrap_or_else(|e| e.into_inner());
            for (o, wc) in out.iter_mut().zip(wcs) {
                o.peer = peer_of(&map, wc.qp_num());
            }
        }
    }

    /// What `peer` needs to connect its side to this one: the endpoint of
    /// the current queue pair for it.
    pub fn endpoint(&self, peer: usize) -> TransportResult<Endpoint> {
        Ok(self.qp(peer)?.endpoint())
    }

    /// Connects the current queue pair for `peer` to the peer's `remote`
    /// endpoint (INIT, RTR, RTS), with the connection options the
    /// transport was built with. For a transport handed to
    /// [`MultiChannel::over`](ferrovia_channel::MultiChannel::over), connect every
    /// peer before that: the channel takes its peers as connected.
    pub fn connect(&self, peer: usize, remote: &Endpoint) -> TransportResult<()> {
        self.qp(peer)?
            .connect(remote, &self.connect)
            .map_err(from_verbs)
    }

    /// The current queue pair of `peer`, held (not freed, even if the peer
    /// reconnects meanwhile) while the [`QpRef`] lives.
    pub fn qp(&self, peer: usize) -> TransportResult<QpRef<'_>> {
        self.qps.get(peer).ok_or(TransportError::NoSuchPeer {
            peer,
            count: self.qps.len(),
        })
    }

    /// One sleep of [`Transport::wait`]: (completions kept for the core,
    /// completions that arrived).
    fn wait_once(
        &self,
        out: &mut [Completion],
        timeout: Duration,
    ) -> TransportResult<(usize, usize)> {
        let mut wcs = [WorkCompletion::default(); POLL_BATCH];
        let n = out.len().clamp(1, POLL_BATCH);
        let got = if self.links.any() {
            // Also wakes when a link has an event: a disconnect flushes.
            let got = self
                .cq
                .wait_or(&mut wcs[..n], timeout, self.links.fds())
                .map_err(from_verbs)?;
            if got == 0 {
                self.check_links();
            }
            got
        } else {
            match self.cq.wait(&mut wcs[..n], timeout) {
                Ok(got) => got,
                Err(VerbsError::Timeout { .. }) => 0,
                Err(e) => return Err(from_verbs(e)),
            }
        };
        for (o, wc) in out.iter_mut().zip(&wcs[..got]) {
            *o = to_completion(wc);
        }
        self.name_senders(out, &wcs[..got]);
        Ok((self.internal.filter(out, got), got))
    }
}

fn to_wr<'a>(op: &SendOp, sges: &'a [Sge]) -> SendWr<'a> {
    let wr = match (op.kind, op.imm) {
        (OpKind::Send, None) => SendWr::send(op.wr_id, sges),
        (OpKind::Send, Some(imm)) => SendWr::send_with_imm(op.wr_id, sges, imm),
        (OpKind::Write, None) => SendWr::write(op.wr_id, sges, op.remote_addr, op.rkey),
        (OpKind::Write, Some(imm)) => {
            SendWr::write_with_imm(op.wr_id, sges, op.remote_addr, op.rkey, imm)
        }
        (OpKind::Read, _) => SendWr::read(op.wr_id, sges, op.remote_addr, op.rkey),
        (OpKind::FetchAdd, _) => {
            SendWr::fetch_add(op.wr_id, sges, op.remote_addr, op.rkey, op.compare_add)
        }
        (OpKind::CompareSwap, _) => SendWr::compare_swap(
            op.wr_id,
            sges,
            op.remote_addr,
            op.rkey,
            op.compare_add,
            op.swap,
        ),
    };
    wr.signaled(op.signaled).inline(op.inline)
}

fn peer_of(map: &[(u32, u32)], qpn: u32) -> Option<u32> {
    let i = map.binary_search_by_key(&qpn, |&(q, _)| q).ok()?;
    Some(map[i].1)
}

fn new_qp(
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    srq: Option<&SharedReceiveQueue>,
    caps: QpCaps,
    port: Option<u8>,
    post_path: PostPath,
) -> TransportResult<QueuePair> {
    let mut b = QueuePair::builder(pd, cq, cq)
        .caps(caps)
        .post_path(post_path);
    if let Some(port) = port {
        b = b.port(port);
    }
    if let Some(srq) = srq {
        b = b.srq(srq);
    }
    b.build().map_err(from_verbs)
}

fn to_completion(wc: &WorkCompletion) -> Completion {
    Completion {
        wr_id: wc.wr_id(),
        status: wc.status(),
        vendor_err: wc.error().vendor_err,
        byte_len: wc.byte_len(),
        imm: if wc.is_success() { wc.imm_data() } else { None },
        peer: None,
    }
}

// SAFETY: the contract is the verbs RC contract, which the device keeps:
// completions come from one CQ shared by this transport's QPs only, carry
// the wr_id they were posted with, in posting order per QP, once each; a
// receive's byte_len is bounded by its SGEs; `to_error` (flush) makes the
// device complete every outstanding WR with IBV_WC_WR_FLUSH_ERR; the device
// checks every SGE against its lkey's registration in this QP's PD; the
// caps are fixed when the QPs are created.
unsafe impl Transport for VerbsTransport {
    fn peers(&self) -> usize {
        self.qps.len()
    }

    fn send_depth(&self, peer: usize) -> u32 {
        self.qps.get(peer).map_or(0, |q| q.caps().max_send_wr)
    }

    fn recv_depth(&self, peer: usize) -> u32 {
        self.qps.get(peer).map_or(0, |q| q.caps().max_recv_wr)
    }

    fn max_inline(&self, peer: usize) -> u32 {
        self.qps.get(peer).map_or(0, |q| q.caps().max_inline_data)
    }

    fn atomics(&self) -> bool {
        self.atomics
    }

    unsafe fn post_send(&self, peer: usize, ops: &[SendOp]) -> TransportResult<()> {
        let qp = self.qp(peer)?;
        if let [op] = ops {
            let mut wr = to_wr(op, op.sges());
            // SAFETY: `QueuePair::post_send` needs every SGE's memory kept
            // allocated and race-free until the op (or a later signalled
            // one) completes or is flushed: our caller promises exactly
            // that (`Transport::post_send`), and this transport reports a
            // completion only when the CQ does. Keys need no promise: the
            // device checks each lkey against the QP's PD and range.
            return unsafe { qp.post_send(&mut wr) }.map_err(from_verbs);
        }
        for chunk in ops.chunks(CHUNK) {
            let mut wrs: [SendWr<'_>; CHUNK] = std::array::from_fn(|i| match chunk.get(i) {
                Some(op) => to_wr(op, op.sges()),
                None => SendWr::send(0, &[]),
            });
            let wrs = &mut wrs[..chunk.len()];
            ferrovia_verbs::link_send(wrs);
            // SAFETY: as for the single op above, for every op of the
            // chunk; `link_send` chained `wrs` into one list that lives in
            // this stack frame until `post_send` returns.
            unsafe { qp.post_send(&mut wrs[0]) }.map_err(from_verbs)?;
        }
        Ok(())
    }

    unsafe fn post_recv(&self, peer: usize, ops: &[RecvOp]) -> TransportResult<()> {
        let qp = self.qp(peer)?;
        for chunk in ops.chunks(CHUNK) {
            let mut wrs: [RecvWr<'_>; CHUNK] = std::array::from_fn(|i| match chunk.get(i) {
                Some(op) => RecvWr::new(op.wr_id, op.sges()),
                None => RecvWr::new(0, &[]),
            });
            let wrs = &mut wrs[..chunk.len()];
            ferrovia_verbs::link_recv(wrs);
            // SAFETY: `QueuePair::post_recv` needs every SGE's memory kept
            // allocated and untouched by the program until completion or
            // flush: our caller's contract (`Transport::post_recv`). The
            // linked list lives in `wrs` until the call returns.
            unsafe { qp.post_recv(&mut wrs[0]) }.map_err(from_verbs)?;
        }
        Ok(())
    }

    fn poll(&self, out: &mut [Completion]) -> TransportResult<usize> {
        let mut wcs = [const { MaybeUninit::<WorkCompletion>::uninit() }; POLL_BATCH];
        let n = out.len().min(POLL_BATCH);
        let got = self.cq.poll_uninit(&mut wcs[..n]).map_err(from_verbs)?;
        if got.is_empty() && self.links.any() {
            self.links.check_now_and_then(|peer| self.flush_gone(peer));
        }
        for (o, wc) in out.iter_mut().zip(got) {
            *o = to_completion(wc);
        }
        self.name_senders(out, got);
        Ok(self.internal.filter(out, got.len()))
    }

    fn wait(&self, out: &mut [Completion], timeout: Duration) -> TransportResult<usize> {
        let start = std::time::Instant::now();
        loop {
            let got = self.wait_once(out, timeout.saturating_sub(start.elapsed()))?;
            // Only internal completions arrived: wait on, until the deadline.
            if got.1 == 0 || got.0 > 0 || start.elapsed() >= timeout {
                return Ok(got.0);
            }
        }
    }

    fn flush(&self, peer: usize) -> TransportResult<()> {
        self.qp(peer)?.to_error().map_err(from_verbs)
    }

    /// A fresh queue pair for `peer`, the old one stopped (as
    /// [`VerbsMultiChannel::renew_endpoint`](crate::VerbsMultiChannel::renew_endpoint) makes one); its
    /// [`Endpoint`], postcard-encoded.
    fn renew(&self, peer: usize) -> TransportResult<Vec<u8>> {
        let endpoint = self.renew_qp(peer)?;
        postcard::to_allocvec(&endpoint)
            .map_err(|e| TransportError::Config(format!("encoding peer {peer}'s endpoint: {e}")))
    }

    /// Decodes the peer's renewed endpoint and connects the new queue pair
    /// to it.
    fn connect_renewed(&self, peer: usize, theirs: &[u8]) -> TransportResult<()> {
        let remote: Endpoint = postcard::from_bytes(theirs).map_err(|e| {
            TransportError::Config(format!(
                "peer {peer}'s renewed link is not a verbs endpoint ({} bytes): {e}",
                theirs.len()
            ))
        })?;
        self.connect(peer, &remote)
    }

    fn disconnected(&self, peer: usize) -> Option<std::net::SocketAddr> {
        if !self.links.has(peer) {
            return None;
        }
        self.check_links();
        self.links.gone(peer)
    }

    fn event_fd(&self) -> Option<BorrowedFd<'_>> {
        self.cq.channel_fd()
    }

    fn arm(&self) -> TransportResult<()> {
        self.cq.arm().map_err(from_verbs)
    }

    fn ack_events(&self) -> TransportResult<()> {
        self.cq.take_events().map_err(from_verbs)?;
        Ok(())
    }

    fn shared_recv_depth(&self) -> u32 {
        self.shared.as_ref().map_or(0, |p| p.srq.max_wr())
    }

    unsafe fn post_shared_recv(&self, ops: &[RecvOp]) -> TransportResult<()> {
        let srq = &self.pool()?.srq;
        for chunk in ops.chunks(CHUNK) {
            let mut wrs: [RecvWr<'_>; CHUNK] = std::array::from_fn(|i| match chunk.get(i) {
                Some(op) => RecvWr::new(op.wr_id, op.sges()),
                None => RecvWr::new(0, &[]),
            });
            let wrs = &mut wrs[..chunk.len()];
            ferrovia_verbs::link_recv(wrs);
            // SAFETY: as for `post_recv`: the caller keeps every SGE's
            // memory allocated and untouched until the receive is reported
            // or `flush_shared` says it never will be.
            unsafe { srq.post_recv(&mut wrs[0]) }.map_err(from_verbs)?;
        }
        Ok(())
    }

    /// Moves every QP to the error state, so none takes another receive
    /// from the pool, and waits (bounded) for each one's last-WQE event.
    /// The receives left in the SRQ stay posted but unreachable: no QP in
    /// the error state takes one, and this transport never attaches
    /// another QP to this SRQ.
    fn flush_shared(&self) -> TransportResult<SharedFlush> {
        let pool = self.pool()?;
        let mut waiting: Vec<u32> = Vec::with_capacity(self.qps.len());
        for qp in self.qps.iter() {
            qp.to_error().map_err(from_verbs)?;
            waiting.push(qp.qp_num());
        }
        pool.read_events(LAST_WQE_WAIT, |ev| {
            if let AsyncEvent::LastWqeReached { qp_num } = ev {
                waiting.retain(|q| q != qp_num);
            }
            !waiting.is_empty()
        });
        if !waiting.is_empty() {
            tracing::debug!(
                "no last-WQE event from {} QP(s) within {LAST_WQE_WAIT:?} (soft-RoCE raises none)",
                waiting.len()
            );
        }
        pool.flushed.store(true, Ordering::Relaxed);
        Ok(SharedFlush::Silent)
    }

    fn arm_shared_limit(&self, limit: u32) -> TransportResult<()> {
        let pool = self.pool()?;
        pool.limit_hit.store(false, Ordering::Relaxed);
        pool.srq.arm_limit(limit).map_err(from_verbs)
    }

    fn shared_limit_reached(&self) -> TransportResult<bool> {
        let pool = self.pool()?;
        pool.read_events(Duration::ZERO, |_| true);
        Ok(pool.limit_hit.swap(false, Ordering::Relaxed))
    }
}
