//! How an async engine waits.

use std::time::Duration;

/// How the reactor learns that work completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wake {
    /// Sleep in the kernel on the transport's event fd (verbs: the
    /// completion channel; UCX: an eventfd its progress thread signals),
    /// after polling for up to `spin` since the last completion first.
    /// The default, with [`DEFAULT_SPIN`]: an exchange whose answer comes
    /// sooner never sleeps; an idle engine does.
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

/// How long the default reactor keeps polling after the last completion
/// before it sleeps in the kernel. Sleeping at once cost a kernel wake-up
/// per message: 8 B send latency 11.5 µs instead of 1.3 µs over UCX
/// shared memory, 13.4 µs instead of 5.2 µs over tcp (ferrovia-perf
/// `send_lat --async`, this host); the spin costs at most this much CPU
/// time after each burst.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

impl Default for Wake {
    fn default() -> Self {
        Wake::Kernel { spin: DEFAULT_SPIN }
    }
}

impl Wake {
    /// Sleep in the kernel as soon as nothing completes (no spin): the
    /// least CPU, a kernel wake-up per message.
    pub const SLEEP_AT_ONCE: Wake = Wake::Kernel {
        spin: Duration::ZERO,
    };
}

/// Settings of an [`Async`](crate::Async) engine.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AsyncConfig {
    /// How the reactor waits (default: in the kernel, after
    /// [`DEFAULT_SPIN`] of polling).
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
