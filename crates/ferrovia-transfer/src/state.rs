//! What the batches of one engine share: its rails' shape, which (rail,
//! peer) connections work, the scheduler, the notification rings, the
//! batch counter.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use ferrovia_mr::MrRegistry;

use crate::error::TransferError;
use crate::notify::Notifier;
use crate::policy::Scheduler;
use crate::prepare::Slicing;

/// What batches share of their engine.
pub(crate) struct EngineState {
    pub(crate) id: u64,
    pub(crate) rank: usize,
    pub(crate) rails: usize,
    pub(crate) peers: usize,
    pub(crate) registries: Vec<MrRegistry>,
    /// Per (rail, peer): whether the connection works.
    pub(crate) alive: RefCell<Vec<bool>>,
    pub(crate) sched: RefCell<Scheduler>,
    pub(crate) notifier: RefCell<Notifier>,
    pub(crate) batches: Cell<u64>,
    pub(crate) slicing: Slicing,
    pub(crate) timeout: Duration,
}

impl EngineState {
    /// The rails' peer of `peer` on `rail`, if both are in range.
    pub(crate) fn vpeer(&self, rail: usize, peer: usize) -> Result<usize, TransferError> {
        if rail >= self.rails || peer >= self.peers {
            return Err(TransferError::NoSuchRail {
                rail,
                peer,
                rails: self.rails,
                peers: self.peers,
            });
        }
        Ok(rail * self.peers + peer)
    }

    pub(crate) fn is_alive(&self, rail: usize, peer: usize) -> bool {
        self.alive
            .borrow()
            .get(rail * self.peers + peer)
            .copied()
            .unwrap_or(false)
    }

    /// Marks the connection of `rail` to `peer` lost; whether it was up.
    pub(crate) fn lose(&self, rail: usize, peer: usize) -> bool {
        let mut alive = self.alive.borrow_mut();
        match alive.get_mut(rail * self.peers + peer) {
            Some(a) if *a => {
                *a = false;
                true
            }
            _ => false,
        }
    }

    /// Marks the connection of the rails' peer `vpeer` working again.
    pub(crate) fn revive(&self, vpeer: usize) {
        if let Some(a) = self.alive.borrow_mut().get_mut(vpeer) {
            *a = true;
        }
    }

    pub(crate) fn next_batch(&self) -> u64 {
        let id = self.batches.get();
        self.batches.set(id + 1);
        id
    }
}
