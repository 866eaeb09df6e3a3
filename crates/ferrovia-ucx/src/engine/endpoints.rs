//! Endpoint lifecycle: creating one per peer (with peer error handling
//! where the transport has it), failing a peer, closing endpoints.

use std::ffi::c_void;
use std::net::SocketAddr;
use std::ptr::null_mut;

use super::Engine;
use super::request::send_param;
use super::token::{CLOSE, MAX_PEERS, ep_error_arg, token};
use crate::error::UcxError;
use crate::events;
use crate::ffi;
use crate::peer::{Peer, RemoteKey};
use crate::status::{Started, started};
use crate::tag;

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
            if status.as_ref().err() == Some(&ffi::UCS_ERR_UNREACHABLE) && self.detect_failures {
                // Shared memory and self have no peer failure handling in
                // UCX 1.13: without it a dead peer surfaces as the scope's
                // timeout and flush instead.
                log::info!(
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
                        source: Box::new(crate::error::status_error("ucp_ep_create", s)),
                    });
                }
            }
        }
        self.me = me;
        self.loopback = Some(me);
        self.addresses = addresses.to_vec();
        self.peers = eps.into_iter().map(Peer::new).collect();
        self.is_dirty = vec![false; self.peers.len()];
        log::debug!("ucx: rank {me} connected to {} endpoints", self.peers.len());
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
        if status.as_ref().err() == Some(&ffi::UCS_ERR_UNREACHABLE) && self.detect_failures {
            // Shared memory has no peer failure handling in UCX 1.13: the
            // owner's link tells instead.
            self.detect_failures = false;
            status = self.create_ep(0, 0, worker);
        }
        let ep = status.map_err(|s| crate::error::addr_error("ucp_ep_create", addr, s))?;
        self.me = 0;
        self.loopback = None;
        self.addresses = vec![worker.to_vec()];
        self.peers = vec![Peer::new(ep)];
        self.is_dirty = vec![false];
        log::debug!("ucx: endpoint to {addr} created");
        Ok(())
    }

    pub(super) fn create_ep(
        &mut self,
        peer: usize,
        generation: u32,
        address: &[u8],
    ) -> Result<ffi::ucp_ep_h, ffi::ucs_status_t> {
        let mut params = ffi::ucp_ep_params_t {
            field_mask: u64::from(ffi::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS),
            address: address.as_ptr().cast(),
            ..Default::default()
        };
        self.create_ep_with(&mut params, peer, generation)
    }

    /// Creates an endpoint from `params`, with peer error handling (for
    /// `peer`'s endpoint of `generation`) when the engine uses it.
    fn create_ep_with(
        &mut self,
        params: &mut ffi::ucp_ep_params_t,
        peer: usize,
        generation: u32,
    ) -> Result<ffi::ucp_ep_h, ffi::ucs_status_t> {
        if self.detect_failures {
            params.field_mask |= u64::from(
                ffi::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | ffi::UCP_EP_PARAM_FIELD_ERR_HANDLER,
            );
            params.err_mode = ffi::UCP_ERR_HANDLING_MODE_PEER;
            params.err_handler.cb = Some(events::endpoint_failed);
            params.err_handler.arg = ep_error_arg(peer, generation) as *mut c_void;
        }
        let mut ep = null_mut();
        // SAFETY: valid worker, params and out-pointer; UCX copies the
        // address (worker or socket address) during the call, and a
        // connection request in `params` is live and released by the call.
        let status = unsafe { ffi::ucp_ep_create(self.worker, params, &mut ep) };
        if status == ffi::UCS_OK {
            Ok(ep)
        } else {
            Err(status)
        }
    }

    /// Stops all work towards `peer`: it is told (a reset, if it can still
    /// hear: it breaks its side too), its endpoint is closed, everything
    /// outstanding completes with an error.
    pub(super) fn fail_peer(&mut self, peer: usize, status: ffi::ucs_status_t) {
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
    pub(super) fn lose_peer(&mut self, peer: usize, status: ffi::ucs_status_t) {
        self.stop_peer(peer, status);
    }

    /// Stops all work towards `peer` without telling it.
    pub(super) fn stop_peer(&mut self, peer: usize, status: ffi::ucs_status_t) {
        if self.peers.get(peer).is_none_or(|p| p.failed.is_some()) {
            return;
        }
        let p = &mut self.peers[peer];
        p.fail(status);
        let ep = std::mem::replace(&mut p.ep, null_mut());
        for (_, k) in p.keys.drain() {
            if let RemoteKey::Ready { rkey, .. } = k {
                self.dead_rkeys.push(rkey);
            }
        }
        self.recvs.cancel(self.worker, Some(peer));
        if !ep.is_null() {
            self.close_ep(ep, true);
        }
        self.mark(peer);
        self.peer_closed(peer);
    }

    pub(super) fn close_ep(&mut self, ep: ffi::ucp_ep_h, force: bool) {
        let t = token(CLOSE, 0, 0);
        let mut param = send_param(t);
        param.op_attr_mask |= ffi::UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = if force {
            ffi::UCP_EP_CLOSE_FLAG_FORCE
        } else {
            0
        };
        // SAFETY: an endpoint of this worker, closed once.
        let r = unsafe { ffi::ucp_ep_close_nbx(ep, &param) };
        if let Started::Pending(_) = started(r) {
            self.closing += 1;
        }
    }
}
