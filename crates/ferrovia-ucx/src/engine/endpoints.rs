//! Endpoint lifecycle: creating one per peer (with peer error handling
//! where the transport has it), failing a peer, closing endpoints.

use std::net::SocketAddr;

use super::Engine;
use super::token::{CLOSE, MAX_PEERS, ep_error, token};
use crate::error::UcxError;
use crate::peer::{Peer, RemoteKey};
use crate::tag;
use crate::ucp::{Ep, Started, Status, addr_error, status_error};

impl Engine {
    pub(super) fn connect(&mut self, me: usize, addresses: &[Vec<u8>]) -> Result<(), UcxError> {
        if !self.peers.is_empty() {
            return Err(UcxError::AlreadyConnected);
        }
        if addresses.len() > MAX_PEERS.min(tag::MAX_PEERS) || me >= addresses.len() {
            return Err(UcxError::BadPeers {
                me,
                peers: addresses.len(),
            });
        }
        let mut eps = Vec::with_capacity(addresses.len());
        for (j, a) in addresses.iter().enumerate() {
            let mut status = self.create_ep(j, 0, a);
            if status.as_ref().err() == Some(&Status::UNREACHABLE) && self.detect_failures {
                // Shared memory and self have no peer failure handling in
                // UCX 1.13: without it a dead peer surfaces as the scope's
                // timeout and flush instead.
                tracing::info!(
                    "ucx: no transport to peer {j} detects peer failure; continuing without"
                );
                self.detect_failures = false;
                status = self.create_ep(j, 0, a);
            }
            match status {
                Ok(ep) => eps.push(ep),
                Err(s) => {
                    for ep in eps {
                        self.close_ep(ep, true);
                    }
                    return Err(UcxError::Endpoint {
                        peer: j,
                        source: Box::new(status_error("ucp_ep_create", s)),
                    });
                }
            }
        }
        self.me = me;
        self.loopback = Some(me);
        self.addresses = addresses.to_vec();
        self.peers = eps.into_iter().map(Peer::new).collect();
        self.is_dirty = vec![false; self.peers.len()];
        tracing::debug!("ucx: rank {me} connected to {} endpoints", self.peers.len());
        Ok(())
    }

    /// Connects this engine's one peer of a connection made by address
    /// (peer 0; this side is 0 to it too) by its worker address, which the
    /// owners traded through their own handshake; `addr` names the peer in
    /// errors.
    pub(crate) fn connect_by_address(
        &mut self,
        worker: &[u8],
        addr: SocketAddr,
    ) -> Result<(), UcxError> {
        if !self.peers.is_empty() {
            return Err(UcxError::AlreadyConnected);
        }
        let mut status = self.create_ep(0, 0, worker);
        if status.as_ref().err() == Some(&Status::UNREACHABLE) && self.detect_failures {
            // Shared memory has no peer failure handling in UCX 1.13: the
            // owner's link tells instead.
            self.detect_failures = false;
            status = self.create_ep(0, 0, worker);
        }
        let ep = status.map_err(|s| addr_error("ucp_ep_create", addr, s))?;
        self.me = 0;
        self.loopback = None;
        self.addresses = vec![worker.to_vec()];
        self.peers = vec![Peer::new(ep)];
        self.is_dirty = vec![false];
        tracing::debug!("ucx: endpoint to {addr} created");
        Ok(())
    }

    /// Creates an endpoint to the worker at `address`, with peer error
    /// handling (for `peer`'s endpoint of `generation`) when the engine
    /// uses it.
    pub(super) fn create_ep(
        &mut self,
        peer: usize,
        generation: u32,
        address: &[u8],
    ) -> Result<Ep, Status> {
        let on_failure = self.detect_failures.then(|| ep_error(peer, generation));
        // SAFETY: valid worker, used under the engine's lock; UCX copies
        // the address during the call.
        unsafe { Ep::create(self.worker, address, on_failure) }
    }

    /// Stops all work towards `peer`: it is told (a reset, if it can still
    /// hear: it breaks its side too), its endpoint is closed, everything
    /// outstanding completes with an error.
    pub(super) fn fail_peer(&mut self, peer: usize, status: Status) {
        if self
            .peers
            .get(peer)
            .is_some_and(|p| p.failed.is_none() && !p.departed)
        {
            self.send_reset(peer);
        }
        self.stop_peer(peer, status);
    }

    /// The endpoint to `peer` failed (UCX's error handler): no goodbye,
    /// which a dead endpoint would hold forever.
    pub(super) fn lose_peer(&mut self, peer: usize, status: Status) {
        self.stop_peer(peer, status);
    }

    /// Stops all work towards `peer` without telling it.
    pub(super) fn stop_peer(&mut self, peer: usize, status: Status) {
        if self.peers.get(peer).is_none_or(|p| p.failed.is_some()) {
            return;
        }
        let p = &mut self.peers[peer];
        p.fail(status);
        let ep = p.ep.take();
        for (_, k) in p.keys.drain() {
            if let RemoteKey::Ready { rkey, .. } = k {
                self.dead_rkeys.push(rkey);
            }
        }
        self.recvs.cancel(self.worker, Some(peer));
        if let Some(ep) = ep {
            self.close_ep(ep, true);
        }
        self.mark(peer);
        self.peer_closed(peer);
    }

    pub(super) fn close_ep(&mut self, ep: Ep, force: bool) {
        let t = token(CLOSE, 0, 0);
        // SAFETY: an endpoint of this worker, closed once.
        let r = unsafe { ep.close(force, t) };
        if let Started::Pending(_) = r {
            self.closing += 1;
        }
    }
}
