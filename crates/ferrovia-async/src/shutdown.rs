//! Ending an async engine without blocking the runtime: flush what nobody
//! waits for, let sends and writes finish, report what had to go.

use std::time::{Duration, Instant};

use ferrovia_channel::engine::Flushed;

use crate::engine::{Target, with};
use crate::error::AsyncError;
use crate::handle::Async;

/// How often a shutdown looks at what is outstanding: completions over
/// verbs and UCX come within microseconds to milliseconds, and a look is
/// a poll under the engine's lock.
const LOOK_EVERY: Duration = Duration::from_millis(1);

/// How long flushed requests may take to be reported before a shutdown
/// gives up on them (as the engine's drop does).
const FLUSH_GRACE: Duration = Duration::from_secs(2);

/// What [`Async::shutdown`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shutdown {
    /// What it flushed: at once, the peers with only receives and reads
    /// outstanding (and the shared pool, if nothing outbound was); past
    /// the deadline, the peers still having anything outstanding. Their
    /// connections are broken until reconnected
    /// ([`Node::reconnect`](ferrovia_node::Node::reconnect)).
    pub flushed: Flushed,
    /// How long it waited for sends, writes and atomics.
    pub waited: Duration,
    /// Requests flushed but never reported within 2 s: the engine keeps
    /// their buffers (and leaks them when it drops).
    pub unreported: usize,
}

impl<T: Target> Async<T> {
    /// Ends the engine's outstanding work without blocking the runtime,
    /// waiting for sends, writes and atomics up to the channel's drain
    /// deadline (see [`Async::shutdown_within`]).
    pub async fn shutdown(&self) -> Result<Shutdown, AsyncError> {
        let deadline = with(&*self.inner, |core| core.config().drain_deadline);
        self.shutdown_within(deadline).await
    }

    /// Ends the engine's outstanding work (what dropped, forgotten and
    /// live futures posted) without blocking the runtime:
    ///
    /// 1. flushes at once the peers whose outstanding requests are all
    ///    receives and reads, and the shared pool's receives if no send,
    ///    write or atomic is outstanding;
    /// 2. waits, asynchronously, for sends, writes and atomics, up to
    ///    `deadline`;
    /// 3. flushes every peer still having anything outstanding (and the
    ///    pool);
    /// 4. waits, asynchronously, up to 2 s for the flushes to be reported.
    ///
    /// Live futures of flushed requests resolve to [`Failed`](crate::Failed)
    /// with a flush status and their buffers; dropped ones' buffers go to
    /// [`Async::take_returned`]. Peers with nothing outstanding keep their
    /// connections, and the engine stays usable; dropping it afterwards
    /// finds nothing to wait for. Operations posted meanwhile are treated
    /// alike.
    ///
    /// `Ok` when every send, write and atomic completed and every flush
    /// was reported; else [`AsyncError::ShutdownIncomplete`] with the same
    /// report. Over verbs, a shared pool's receives are never reported
    /// ([`Flushed::pool_silent`]): their buffers come back when the engine
    /// drops, and they do not count as unreported.
    pub async fn shutdown_within(&self, deadline: Duration) -> Result<Shutdown, AsyncError> {
        let start = Instant::now();
        let mut flushed = with(&*self.inner, |core| core.flush_inbound());
        while self.look(|core| core.outbound_outstanding()) > 0 && start.elapsed() < deadline {
            tokio::time::sleep(LOOK_EVERY).await;
        }
        let waited = start.elapsed();
        let rest = with(&*self.inner, |core| core.flush_remaining(&flushed));
        flushed.merge(rest);
        let flushing = Instant::now();
        while self.look(|core| core.awaiting_reports()) > 0 && flushing.elapsed() < FLUSH_GRACE {
            tokio::time::sleep(LOOK_EVERY).await;
        }
        let report = Shutdown {
            flushed,
            waited,
            unreported: self.look(|core| core.awaiting_reports()),
        };
        if report.flushed.outbound > 0 || report.unreported > 0 {
            return Err(AsyncError::ShutdownIncomplete(Box::new(report)));
        }
        Ok(report)
    }

    /// Routes what completed (waking futures), then asks `f`.
    fn look(&self, f: impl FnOnce(&ferrovia_channel::engine::ChannelCore) -> usize) -> usize {
        with(&*self.inner, |core| {
            if let Err(e) = core.progress() {
                tracing::warn!("ferrovia-async shutdown: polling the transport: {e}");
            }
            f(core)
        })
    }
}
