//! How an async engine waits.

use std::time::Duration;

/// How the reactor learns that work completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wake {
    /// Sleep in the kernel on the transport's event fd (verbs: the
    /// completion channel; UCX: an eventfd its progress thread signals),
    /// after polling for up to `spin` first. The default, with no spin.
    Kernel {
        /// How long to keep polling after the last completion before
        /// sleeping: trades CPU for latency when work arrives in bursts.
        spin: Duration,
    },
    /// Never sleep: the reactor polls between the runtime's other tasks,
    /// and a future polls the transport itself before waiting. Lowest
    /// latency; one core busy.
    BusyPoll,
}

impl Default for Wake {
    fn default() -> Self {
        Wake::Kernel {
            spin: Duration::ZERO,
        }
    }
}

/// Settings of an [`Async`](crate::Async) engine.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AsyncConfig {
    /// How the reactor waits (default: in the kernel, no spin).
    pub wake: Wake,
    /// How long a request whose future was dropped may stay outstanding
    /// before its peer's connection is flushed, so its buffer comes back
    /// (the drain rule of a scope, per request). `None`: the channel's
    /// drain deadline (default 10 s).
    pub abandoned_deadline: Option<Duration>,
    /// How long a barrier re-polls at once before it checks every
    /// millisecond instead (peers' signals raise no event).
    pub barrier_spin: Duration,
}

impl Default for AsyncConfig {
    fn default() -> Self {
        AsyncConfig {
            wake: Wake::default(),
            abandoned_deadline: None,
            barrier_spin: Duration::from_millis(1),
        }
    }
}

impl AsyncConfig {
    /// Sets how the reactor waits.
    pub fn wake(mut self, wake: Wake) -> Self {
        self.wake = wake;
        self
    }

    /// Busy polling ([`Wake::BusyPoll`]).
    pub fn busy_poll(self) -> Self {
        self.wake(Wake::BusyPoll)
    }

    /// Sets how long a dropped request may stay outstanding before its
    /// peer is flushed.
    pub fn abandoned_deadline(mut self, deadline: Duration) -> Self {
        self.abandoned_deadline = Some(deadline);
        self
    }

    /// Sets how long a barrier re-polls at once.
    pub fn barrier_spin(mut self, spin: Duration) -> Self {
        self.barrier_spin = spin;
        self
    }
}
