//! The engine's control plane: key requests and replies, revocations and
//! their acknowledgements, and the shutdown that revokes what peers still
//! hold and says goodbye (wire format in `crate::control`, the owner's
//! waiting side in `crate::revoke`).
//!
//! Owner: a revocation goes to every peer that fetched the key; a peer is
//! crossed off when its acknowledgement arrives, when its endpoint fails
//! or is flushed, or when it says goodbye; once the deadline passes the
//! silent ones get their endpoints force-closed. Peer: a revoked key is
//! marked `Revoked` at once (later accesses fail with
//! `IBV_WC_REM_ACCESS_ERR` before UCX sees them); if accesses with it may
//! be in flight, the endpoint to the owner is flushed first, and only then
//! is the rkey destroyed and the acknowledgement sent.
//!
//! What a hostile peer can make this side hold is bounded: a fetch is
//! noted once per live key and peer, a revocation is only ever this side's
//! own, and a revocation flush only exists for a key this side unpacked.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Instant;

use super::request::record;
use super::token::{CTRL, GOODBYE_FLUSH, REVOKE_FLUSH, token};
use super::{CLOSE_GRACE, Cmd, Engine};
use crate::control::{AM_ID, Control};
use crate::keys::KeyInfo;
use crate::mapped::Mapping;
use crate::peer::RemoteKey;
use crate::revoke::Revocation;
use crate::ucp::{Rkey, Status};

/// What the engine keeps for the control plane.
#[derive(Default)]
pub(super) struct ControlPlane {
    /// Revocations of this side's keys awaiting peers' answers.
    revocations: Vec<Arc<Revocation>>,
    /// Peers' revoked keys whose endpoint is being flushed before the
    /// acknowledgement, by flush id.
    flushing: HashMap<u32, Flushing>,
    next_flush: u32,
    /// Goodbye flushes not yet complete (shutdown).
    goodbyes: usize,
    /// Per peer: its goodbye flush was issued and has not completed (an
    /// endpoint never wired up, to a peer that never answered): such an
    /// endpoint is force-closed, which cancels what it holds; a worker
    /// destroyed with a request pending on an endpoint aborts in UCX 1.13.
    goodbye_pending: Vec<bool>,
}

impl ControlPlane {
    /// Whether revocations of this side's keys await answers.
    pub(super) fn has_revocations(&self) -> bool {
        !self.revocations.is_empty()
    }
}

struct Flushing {
    key: u32,
    rkey: Rkey,
}

impl Engine {
    fn malformed(&self, why: &str) {
        self.shared.malformed.fetch_add(1, SeqCst);
        tracing::warn!("ucx: dropped a malformed control message ({why})");
    }

    /// Acts on one control message; a malformed one is counted and dropped.
    pub(super) fn on_control(&mut self, bytes: &[u8]) {
        let Some(msg) = Control::decode(bytes) else {
            return self.malformed("does not decode");
        };
        let from = match msg {
            Control::Request { from, .. }
            | Control::Reply { from, .. }
            | Control::Revoke { from, .. }
            | Control::Ack { from, .. }
            | Control::Goodbye { from }
            | Control::Reset { from, .. } => from as usize,
        };
        if from >= self.peers.len() {
            return self.malformed("unknown sender");
        }
        match msg {
            Control::Request { key, .. } => {
                // A transport shutting down hands out nothing more.
                let info = if self.shutdown {
                    None
                } else {
                    self.dir.fetch(key, from)
                };
                let me = self.me as u32;
                let reply = Control::Reply {
                    from: me,
                    key,
                    info,
                };
                self.send_control(from, reply.encode());
            }
            Control::Reply { key, info, .. } => self.on_reply(from, key, info),
            Control::Revoke { key, .. } => self.on_revoke(from, key),
            Control::Ack { key, .. } => self.on_ack(from, key),
            Control::Goodbye { .. } if Some(from) == self.loopback => {
                self.malformed("goodbye from itself")
            }
            Control::Goodbye { .. } => self.on_goodbye(from),
            Control::Reset { .. } if Some(from) == self.loopback => {
                self.malformed("reset from itself")
            }
            Control::Reset { generation, .. } => self.on_reset(from, generation),
        }
    }

    fn on_reply(&mut self, peer: usize, key: u32, info: Option<KeyInfo>) {
        let p = &mut self.peers[peer];
        match p.keys.get(key) {
            Some(RemoteKey::Requested) => {}
            // Revoked while the reply was on its way: it stays revoked.
            Some(RemoteKey::Revoked) => return,
            _ => return self.malformed("unsolicited key reply"),
        }
        if p.failed.is_some() {
            return;
        }
        let state = match info {
            None => RemoteKey::Missing,
            Some(info) => {
                // SAFETY: live endpoint; UCX copies what it needs. It does
                // not validate the packed bytes (no length is passed): they
                // come from a peer of the job, which the job token admits
                // and which is trusted to run ferrovia (ARCHITECTURE).
                let unpacked = unsafe { Rkey::unpack(p.live_ep(), &info.packed) };
                match unpacked {
                    Ok(rkey) => {
                        let mapped = if self.map_keys {
                            // SAFETY: just unpacked, not destroyed.
                            unsafe { Mapping::of(rkey, &info) }
                        } else {
                            None
                        };
                        RemoteKey::Ready { rkey, info, mapped }
                    }
                    Err(e) => {
                        tracing::warn!("ucx: peer {peer}'s key {key}: {e}");
                        RemoteKey::Missing
                    }
                }
            }
        };
        p.keys.insert(key, state);
        self.mark(peer);
    }

    /// Peer side: `owner` revoked `key`.
    fn on_revoke(&mut self, owner: usize, key: u32) {
        let p = &mut self.peers[owner];
        let unpacked = match p.keys.get(key) {
            Some(RemoteKey::Ready { .. } | RemoteKey::Requested) => {
                match p.keys.insert(key, RemoteKey::Revoked) {
                    Some(RemoteKey::Ready { rkey, .. }) => Some(rkey),
                    _ => None,
                }
            }
            // Never unpacked here: no access of ours used it.
            _ => None,
        };
        let (ep, failed) = (p.ep, p.failed.is_some());
        // Work waiting for the key fails now.
        self.mark(owner);
        let Some(rkey) = unpacked else {
            return self.acknowledge(owner, key);
        };
        if failed {
            // The endpoint is closed (and the owner knows): destroyed at
            // shutdown, like the other keys of a failed peer.
            self.dead_rkeys.push(rkey);
            return;
        }
        let ep = ep.expect(crate::peer::LIVE);
        // Puts and gets with the key may still be in flight: acknowledge
        // once a flush of the endpoint (which completes them at both ends)
        // has completed.
        let id = self.cp.next_flush;
        self.cp.next_flush = id.wrapping_add(1);
        self.cp.flushing.insert(id, Flushing { key, rkey });
        let t = token(REVOKE_FLUSH, owner, id);
        // SAFETY: live endpoint (the peer has not failed), used under the
        // engine's lock.
        let r = unsafe { ep.flush(t) };
        record(t, r);
    }

    /// Peer side: the flush after a revocation of `owner`'s key completed.
    pub(super) fn revoke_flushed(&mut self, owner: usize, id: u32, status: Status) {
        let Some(f) = self.cp.flushing.remove(&id) else {
            return;
        };
        if status != Status::OK {
            // The endpoint failed or was closed, cancelling what was in
            // flight; the owner sees it closed rather than acknowledged.
            self.dead_rkeys.push(f.rkey);
            return;
        }
        // SAFETY: unpacked once, destroyed once; no access with it is
        // outstanding: it left the key table before the flush, and the
        // flush completed every access issued before it.
        unsafe { f.rkey.destroy() };
        self.acknowledge(owner, f.key);
    }

    fn acknowledge(&mut self, owner: usize, key: u32) {
        let from = self.me as u32;
        self.send_control(owner, Control::Ack { from, key }.encode());
    }

    /// Owner side: `peer` acknowledged the revocation of `key`.
    fn on_ack(&mut self, peer: usize, key: u32) {
        let p = &self.peers[peer];
        let given_up = p.failed.is_some() || p.departed;
        let waiting = self
            .cp
            .revocations
            .iter()
            .position(|r| r.key == key && r.awaits(peer));
        match waiting {
            Some(i) => {
                if self.cp.revocations[i].answered(peer) && self.cp.revocations[i].is_settled() {
                    self.cp.revocations.swap_remove(i);
                }
            }
            // Late, from a peer whose endpoint was closed meanwhile.
            None if given_up => {}
            None => self.malformed("unsolicited acknowledgement"),
        }
    }

    /// Whether `peer` is gone: its endpoint failed (not by this side's
    /// own flush), or it said goodbye.
    pub(crate) fn peer_gone(&mut self, peer: usize) -> bool {
        self.handle_events();
        self.peers
            .get(peer)
            .is_some_and(|p| p.departed || p.failed.is_some_and(|s| s != Status::CANCELED))
    }

    /// Why `peer`'s endpoint failed, if it did (not by this side's own
    /// flush).
    pub(crate) fn peer_failure(&mut self, peer: usize) -> Option<Status> {
        self.handle_events();
        self.peers
            .get(peer)
            .and_then(|p| p.failed)
            .filter(|&s| s != Status::CANCELED)
    }

    /// `peer` shut down or closed its endpoint to this side: it accesses
    /// nothing of ours any more, and nothing of ours may reach its memory
    /// (its registrations may outlive its transport).
    fn on_goodbye(&mut self, peer: usize) {
        tracing::debug!("ucx: peer {peer} said goodbye");
        let p = &mut self.peers[peer];
        p.departed = true;
        // Accesses with them may be in flight: destroyed at shutdown.
        let dead = &mut self.dead_rkeys;
        p.keys.revoke_all(|rkey| dead.push(rkey));
        self.mark(peer);
        self.peer_closed(peer);
    }

    /// Owner side: sends a revocation to every pending peer that can still
    /// answer, and crosses off the others.
    pub(super) fn start_revocation(&mut self, r: Arc<Revocation>) {
        let msg = Control::Revoke {
            from: self.me as u32,
            key: r.key,
        }
        .encode();
        for peer in r.pending() {
            match self.peers.get(peer) {
                Some(p) if p.failed.is_none() && !p.departed => {
                    self.send_control(peer, msg.clone());
                }
                // Closed or gone: nothing of theirs reaches the memory.
                _ => {
                    r.answered(peer);
                }
            }
        }
        if !r.is_settled() {
            self.cp.revocations.push(r);
        }
    }

    /// Owner side: `peer`'s endpoint failed or was closed, or it left.
    pub(super) fn peer_closed(&mut self, peer: usize) {
        for r in &self.cp.revocations {
            r.answered(peer);
        }
        self.cp.revocations.retain(|r| !r.is_settled());
    }

    /// Owner side: force-closes the endpoints of peers that did not
    /// answer a revocation by its deadline; whether there were any.
    pub(super) fn expire_revocations(&mut self) -> bool {
        if self.cp.revocations.is_empty() {
            return false;
        }
        let now = Instant::now();
        let silent: Vec<(usize, u32)> = self
            .cp
            .revocations
            .iter()
            .filter(|r| now >= r.deadline)
            .flat_map(|r| r.pending().into_iter().map(move |p| (p, r.key)))
            .collect();
        for &(peer, key) in &silent {
            if self.peers.get(peer).is_some_and(|p| p.failed.is_none()) {
                tracing::warn!(
                    "ucx: peer {peer} did not acknowledge the revocation of key {key} within {:?}; closing its endpoint",
                    self.dir.revocation_timeout
                );
            }
            self.fail_peer(peer, Status::TIMED_OUT);
            self.peer_closed(peer);
        }
        !silent.is_empty()
    }

    /// Revocations that raced the shutdown; other commands are dropped (no
    /// channel, hence no work, outlives the transport).
    fn drain_revocations(&mut self) {
        while let Some(cmd) = self.shared.cmds.pop() {
            match cmd {
                Cmd::Revoke(r) => self.start_revocation(r),
                Cmd::Flush { peer } => self.fail_peer(peer, Status::CANCELED),
                _ => {}
            }
        }
    }

    fn progress_once(&mut self) {
        // SAFETY: the worker is used under the engine's lock only.
        unsafe { self.worker.progress() };
        self.handle_events();
        self.expire_revocations();
    }

    /// The flush before a goodbye to `peer` completed.
    pub(super) fn goodbye_flushed(&mut self, peer: usize, status: Status) {
        self.cp.goodbyes = self.cp.goodbyes.saturating_sub(1);
        if let Some(p) = self.cp.goodbye_pending.get_mut(peer) {
            *p = false;
        }
        if status == Status::OK {
            self.say_goodbye(peer);
        }
    }

    /// Tells `peer` this side accesses nothing of its any more (shutdown,
    /// or its endpoint is about to be force-closed, which cancels what is
    /// in flight): it stops waiting for acknowledgements from this side,
    /// which shared memory could not tell it.
    pub(super) fn say_goodbye(&mut self, peer: usize) {
        if Some(peer) != self.loopback {
            let from = self.me as u32;
            self.send_control(peer, Control::Goodbye { from }.encode());
        }
    }

    /// Shutdown: cancels receives; revokes every key peers still hold and
    /// waits for their answers (bounded as a deregistration is); then
    /// flushes every endpoint and says goodbye, so a peer stops waiting
    /// for this side (shared memory cannot tell it is gone); closes the
    /// endpoints gracefully (bounded); then releases the remote keys.
    /// `Drop` destroys the worker.
    pub(super) fn close_all(&mut self) {
        let _span = tracing::debug_span!("ucx_shutdown", peers = self.peers.len()).entered();
        self.recvs.cancel(self.worker, None);
        // Registrations that outlive the transport: once it is gone,
        // nothing would revoke them.
        let timeout = self.dir.revocation_timeout;
        for (key, peers) in self.dir.take_fetched() {
            self.start_revocation(Arc::new(Revocation::new(key, peers, timeout)));
        }
        // Settled before the goodbye, which makes peers forget this side's
        // keys without a flush. Revocations end by their deadlines.
        loop {
            self.drain_revocations();
            if self.cp.revocations.is_empty() {
                break;
            }
            self.progress_once();
        }
        self.cp.goodbye_pending = vec![false; self.peers.len()];
        for peer in 0..self.peers.len() {
            let p = &self.peers[peer];
            if Some(peer) == self.loopback || p.failed.is_some() || p.departed {
                continue;
            }
            let t = token(GOODBYE_FLUSH, peer, 0);
            // SAFETY: live endpoint, used under the engine's lock.
            let r = unsafe { p.live_ep().flush(t) };
            self.cp.goodbyes += 1;
            self.cp.goodbye_pending[peer] = true;
            record(t, r);
        }
        let deadline = Instant::now() + CLOSE_GRACE;
        loop {
            self.drain_revocations();
            self.progress_once();
            let saying_goodbye = self.cp.goodbyes > 0 || !self.ctrl.is_empty();
            if self.cp.revocations.is_empty() && (!saying_goodbye || Instant::now() >= deadline) {
                break;
            }
        }
        for peer in 0..self.peers.len() {
            let p = &mut self.peers[peer];
            // A peer that said goodbye closed its side: a graceful close of
            // a client-server endpoint would wait for it in vain.
            let departed = p.departed;
            if p.failed.is_none() {
                // Nothing is sent on the endpoint once its close starts.
                p.fail(Status::CANCELED);
            }
            for (_, k) in p.keys.drain() {
                if let RemoteKey::Ready { rkey, .. } = k {
                    self.dead_rkeys.push(rkey);
                }
            }
            if let Some(ep) = p.ep.take() {
                let never_answered = self.cp.goodbye_pending.get(peer) == Some(&true);
                tracing::debug!(peer, never_answered, departed, "ucx: closing the endpoint");
                self.close_ep(ep, never_answered || departed);
            }
        }
        let deadline = Instant::now() + CLOSE_GRACE;
        while (self.closing > 0 || !self.ctrl.is_empty()) && Instant::now() < deadline {
            self.progress_once();
        }
        self.dead_rkeys
            .extend(self.cp.flushing.drain().map(|(_, f)| f.rkey));
        if self.closing > 0 {
            // Requests of those endpoints may still use the keys: leak them.
            tracing::warn!(
                "ucx: {} endpoint(s) did not close in {CLOSE_GRACE:?}",
                self.closing
            );
            self.dead_rkeys.clear();
        }
        for rkey in self.dead_rkeys.drain(..) {
            // SAFETY: unpacked once, destroyed once, after its last use
            // (its endpoint is closed).
            unsafe { rkey.destroy() };
        }
    }

    /// Sends a control message to `peer`; the bytes stay here until UCX
    /// is done with them.
    pub(super) fn send_control(&mut self, peer: usize, bytes: Vec<u8>) {
        let Some(p) = self.peers.get(peer) else {
            return;
        };
        let Some(ep) = p.ep.filter(|_| p.failed.is_none()) else {
            return;
        };
        let id = self.next_ctrl;
        self.next_ctrl = self.next_ctrl.wrapping_add(1);
        let t = token(CTRL, peer, id);
        let buf = self.ctrl.entry(id).insert_entry(bytes);
        // SAFETY: live endpoint; the header bytes stay in `self.ctrl` until
        // the completion event removes them.
        let r = unsafe { ep.am_send(AM_ID, buf.get(), t) };
        record(t, r);
    }
}
