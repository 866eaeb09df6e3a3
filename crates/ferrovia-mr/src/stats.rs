//! Registry counters.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A snapshot of a registry's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegistryStats {
    /// Lookups (and raw registrations) served by an existing registration.
    pub hits: u64,
    /// Lookups that found no covering registration.
    pub misses: u64,
    /// `ibv_reg_mr` calls made.
    pub registrations_made: u64,
    /// Registrations alive now.
    pub live_registrations: u64,
    /// Bytes covered by live registrations.
    pub registered_bytes: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) made: AtomicU64,
    pub(crate) live: AtomicU64,
    pub(crate) bytes: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> RegistryStats {
        RegistryStats {
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            registrations_made: self.made.load(Relaxed),
            live_registrations: self.live.load(Relaxed),
            registered_bytes: self.bytes.load(Relaxed),
        }
    }

    pub(crate) fn hit(&self) {
        self.hits.fetch_add(1, Relaxed);
    }

    pub(crate) fn miss(&self) {
        self.misses.fetch_add(1, Relaxed);
    }
}
