//! Connection generations: what keeps anything of an old connection out
//! of the new one after a reconnect, as a new RC queue pair cannot receive
//! an old one's messages.
//!
//! - `renew` stops the endpoint (its work fails, its receives are
//!   cancelled) and proposes the next generation; the peer stays failed,
//!   so posts fail, until `reconnect` makes the new endpoint with the
//!   generation both sides agree on (the larger proposal: a side whose
//!   earlier reconnect failed half-way does not leave the two out of step).
//! - Every message carries its connection's generation in the tag, and a
//!   receive matches only the current one. A message of the replaced
//!   generation, still in UCX's unexpected queue or arriving late, is
//!   taken by a zero-length sweeper receive, dropped and counted. A
//!   pool receive, which matches any sender and generation, drops (and is
//!   posted again for) a message of another generation, or of a sender
//!   whose connection this side broke.
//! - A side that flushes a connection tells the peer (a reset naming the
//!   generation), which breaks its side too: its later sends, writes and
//!   atomics fail instead of landing, as they would against a queue pair
//!   in the error state. A late reset of an older generation is ignored.
//! - A message too long for its receive breaks the connection at the
//!   receiver (verbs moves the queue pair to the error state), so nothing
//!   more of that sender's is delivered, to its receives or to the pool.

use std::sync::atomic::Ordering::Relaxed;

use ferrovia_channel::transport::Completion;
use ferrovia_types::WcStatus;

use super::Engine;
use crate::control::Control;
use crate::error::UcxError;
use crate::peer::{Peer, seq_le};
use crate::tag::{self, Finished};
use crate::ucp::{Status, events, status_error};

impl Engine {
    /// Stops `peer`'s endpoint for a reconnect and proposes the next
    /// generation (what the peer's `reconnect` needs). The old endpoint is
    /// stopped without a goodbye or reset: the peer renews its side too.
    /// Nothing may be outstanding towards `peer` (the channel's scopes
    /// drained it).
    pub(crate) fn renew(&mut self, peer: usize) -> Result<u32, UcxError> {
        self.drain_commands();
        self.handle_events();
        if self.addresses.get(peer).is_none() {
            return Err(UcxError::BadPeers {
                me: self.me,
                peers: self.peers.len(),
            });
        }
        self.stop_peer(peer, Status::CANCELED);
        self.handle_events();
        let p = &mut self.peers[peer];
        let proposed = p.generation.wrapping_add(1);
        p.proposed = Some(proposed);
        Ok(proposed)
    }

    /// Makes `peer`'s new endpoint, of the larger of this side's proposal
    /// and the peer's (`theirs`), and sweeps the replaced generation's
    /// late messages. `moved` is the worker address of a new process that
    /// took the peer's place, which the new endpoint (and later ones) go to.
    pub(crate) fn reconnect(
        &mut self,
        peer: usize,
        theirs: u32,
        moved: Option<Vec<u8>>,
    ) -> Result<u32, UcxError> {
        self.drain_commands();
        self.handle_events();
        if let (Some(new), Some(old)) = (moved, self.addresses.get_mut(peer)) {
            *old = new;
        }
        let Some(address) = self.addresses.get(peer).cloned() else {
            return Err(UcxError::BadPeers {
                me: self.me,
                peers: self.peers.len(),
            });
        };
        let Some(mine) = self.peers[peer].proposed else {
            return Err(UcxError::NotRenewed { peer });
        };
        let generation = if seq_le(theirs, mine) { mine } else { theirs };
        let old = self.peers[peer].generation;
        let ep = self
            .create_ep(peer, generation, &address)
            .map_err(|s| status_error("ucp_ep_create", s))?;
        self.peers[peer] = Peer::renewed(ep, &self.peers[peer], generation);
        self.recvs.post_sweeper(self.worker, peer, old);
        self.peers[peer].sweeping = Some(old);
        if events::pending() {
            self.handle_events();
        }
        tracing::debug!("ucx: endpoint to peer {peer} renewed (generation {old} -> {generation})");
        Ok(generation)
    }

    /// Tells `peer` this side flushed their connection (before its
    /// endpoint is force-closed): the peer breaks its side too.
    pub(super) fn send_reset(&mut self, peer: usize) {
        if Some(peer) == self.loopback {
            return;
        }
        let Some(generation) = self.peers.get(peer).map(|p| p.generation) else {
            return;
        };
        let from = self.me as u32;
        self.send_control(peer, Control::Reset { from, generation }.encode());
    }

    /// `peer` flushed its connection of `generation` to this side.
    pub(super) fn on_reset(&mut self, peer: usize, generation: u32) {
        let p = &self.peers[peer];
        if p.generation != generation || p.failed.is_some() {
            tracing::debug!(
                "ucx: a reset of peer {peer}'s connection of generation {generation} arrived late; ignored"
            );
            return;
        }
        tracing::info!(
            "ucx: peer {peer} flushed its connection to this side (generation {generation}); breaking this side too"
        );
        self.lose_peer(peer, Status::CONNECTION_RESET);
    }

    /// Acts on a receive that ended.
    pub(super) fn on_received(&mut self, f: Finished) {
        match f {
            Finished::Done { completion, peer } => {
                let too_long = completion.status == WcStatus::LOC_LEN_ERR;
                self.complete(completion);
                if too_long {
                    self.break_for_length(peer);
                }
            }
            Finished::Pooled {
                completion,
                sender,
                op,
            } => {
                let Some((peer, tag)) = sender else {
                    return self.complete(completion);
                };
                let live = self
                    .peers
                    .get(peer)
                    .is_some_and(|p| p.failed.is_none() && tag::is_generation(tag, p.generation));
                if !live {
                    self.shared.stale.fetch_add(1, Relaxed);
                    tracing::debug!(
                        "ucx: dropped a pooled message of peer {peer}'s old connection"
                    );
                    if self.shutdown || self.pool_cancelling {
                        // The pool is being flushed: report it as such.
                        return self.complete(Completion {
                            status: WcStatus::WR_FLUSH_ERR,
                            byte_len: 0,
                            imm: None,
                            peer: None,
                            ..completion
                        });
                    }
                    return self.recvs.post(self.worker, tag::ANY, 0, &op);
                }
                let too_long = completion.status == WcStatus::LOC_LEN_ERR;
                self.complete(completion);
                if too_long {
                    self.break_for_length(peer);
                }
            }
            Finished::Swept {
                peer,
                generation,
                took,
            } => {
                if !took {
                    return;
                }
                self.shared.stale.fetch_add(1, Relaxed);
                tracing::debug!(
                    "ucx: dropped a message of peer {peer}'s replaced connection (generation {generation})"
                );
                if self.peers.get(peer).and_then(|p| p.sweeping) == Some(generation)
                    && !self.shutdown
                {
                    self.recvs.post_sweeper(self.worker, peer, generation);
                }
            }
        }
    }

    /// A message of `peer`'s was longer than its receive: the connection
    /// breaks, as a queue pair moves to the error state, and the peer is
    /// told.
    fn break_for_length(&mut self, peer: usize) {
        if self.peers.get(peer).is_some_and(|p| p.failed.is_none()) {
            tracing::warn!(
                "ucx: a message of peer {peer}'s was longer than its receive; breaking the connection"
            );
            self.fail_peer(peer, Status::MESSAGE_TRUNCATED);
        }
    }
}
