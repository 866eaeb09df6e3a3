//! The reactor: one task per engine that routes completions and wakes the
//! futures whose requests completed. It sleeps in the kernel on the
//! transport's event fd (through tokio's `AsyncFd`), following the
//! protocol of `Transport::arm`: poll until empty, arm, poll once more,
//! sleep until the fd is readable, consume, repeat.
//!
//! It holds only a weak reference to the engine, so it never keeps a
//! dropped engine alive, and watches a duplicate of the transport's fd
//! (its own descriptor of the same open file), so the transport closing
//! its fd can never leave it watching a reused number.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use crate::config::Wake;
use crate::engine::Engine;
use crate::gate::Gate;

/// The longest sleep: even a lost wake-up delays nothing for longer.
const MAX_SLEEP: Duration = Duration::from_millis(100);
/// How often a transport without an event fd is polled.
const TICK: Duration = Duration::from_millis(1);

/// One turn's strong reference; dropping it lets the reference go, then
/// leaves the gate (in that order: a closer that sees `busy` down must find
/// the count without it).
struct Turn<'a> {
    e: Option<Arc<dyn Engine>>,
    gate: &'a Gate,
}

impl std::ops::Deref for Turn<'_> {
    type Target = dyn Engine + 'static;
    fn deref(&self) -> &Self::Target {
        self.e.as_deref().expect("held until the turn drops")
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        drop(self.e.take());
        self.gate.leave();
    }
}

pub(crate) async fn run(
    engine: Weak<dyn Engine>,
    fd: Option<OwnedFd>,
    poke: Arc<Notify>,
    wake: Wake,
    fd_wakes: Arc<AtomicU64>,
    gate: Arc<Gate>,
) {
    let mut fd = fd.and_then(|fd| {
        // SAFETY: `fd` is our own duplicate of the transport's event fd (an
        // `OwnedFd`): open, and the same descriptor of the same open file,
        // until the `AsyncFd` drops it; nothing else closes or replaces it.
        match unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) } {
            Ok(fd) => Some(fd),
            Err(e) => {
                tracing::warn!(
                    "ferrovia-async: cannot watch the transport's event fd ({}); polling it every {TICK:?}",
                    e.into_parts().1
                );
                None
            }
        }
    });
    let mut readable = false;
    let mut last_activity = Instant::now();
    loop {
        if !gate.enter() {
            if engine.strong_count() == 0 {
                return;
            }
            sleep_or_poke(&poke, TICK).await;
            continue;
        }
        let Some(e) = engine.upgrade() else {
            gate.leave();
            return;
        };
        let e = Turn {
            e: Some(e),
            gate: &gate,
        };
        if readable {
            e.ack();
            readable = false;
        }
        let (got, due) = e.turn();
        if got > 0 {
            last_activity = Instant::now();
        }
        let spin = match wake {
            Wake::BusyPoll => {
                drop(e);
                tokio::task::yield_now().await;
                continue;
            }
            Wake::Kernel { spin } => spin,
        };
        if got > 0 || last_activity.elapsed() < spin {
            // Let the woken futures run (they may post more), then look
            // again before sleeping.
            drop(e);
            tokio::task::yield_now().await;
            continue;
        }
        let Some(watched) = &fd else {
            drop(e);
            sleep_or_poke(&poke, TICK).await;
            continue;
        };
        if e.arm_and_poll() > 0 {
            last_activity = Instant::now();
            drop(e);
            tokio::task::yield_now().await;
            continue;
        }
        drop(e);
        let nap = due.map_or(MAX_SLEEP, |d| d.min(MAX_SLEEP));
        tokio::select! {
            r = watched.readable() => match r {
                Ok(mut guard) => {
                    guard.clear_ready();
                    readable = true;
                    fd_wakes.fetch_add(1, Relaxed);
                }
                Err(err) => {
                    tracing::warn!("ferrovia-async: the event fd failed ({err}); polling every {TICK:?}");
                    fd = None;
                }
            },
            _ = poke.notified() => {}
            _ = tokio::time::sleep(nap) => {}
        }
    }
}

async fn sleep_or_poke(poke: &Notify, nap: Duration) {
    tokio::select! {
        _ = poke.notified() => {}
        _ = tokio::time::sleep(nap) => {}
    }
}
