//! The connection-manager links of a verbs transport's connections made
//! by address: their events are read without blocking (when a wait
//! sleeps, and now and then while polls find nothing), and a peer's
//! `DISCONNECTED` flushes its queue pair, so its pending work fails at
//! once instead of waiting for a message that will never come.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrovia_verbs::cm::{CmEventType, CmLink};

/// How often empty polls read the links' events (a busy-polling thread
/// then notices a disconnect within about this long).
const CHECK_EVERY: Duration = Duration::from_millis(1);

/// The links of the peers connected by address.
pub(crate) struct LinkWatch {
    /// Per peer: its link, if its connection was made by address.
    links: Vec<Option<CmLink>>,
    /// Per peer: whether it disconnected.
    gone: Vec<AtomicBool>,
    /// The links' event fds, for a sleeping wait.
    fds: Vec<RawFd>,
    /// When empty polls last read the events (µs since `start`).
    last_check: AtomicU64,
    start: Instant,
}

impl LinkWatch {
    /// A watch over `peers` peers with no link yet.
    pub(crate) fn new(peers: usize) -> LinkWatch {
        LinkWatch {
            links: (0..peers).map(|_| None).collect(),
            gone: (0..peers).map(|_| AtomicBool::new(false)).collect(),
            fds: Vec::new(),
            last_check: AtomicU64::new(0),
            start: Instant::now(),
        }
    }

    /// Watches `link` for `peer` (replacing none: a peer has one).
    pub(crate) fn set(&mut self, peer: usize, link: CmLink) -> Result<(), String> {
        match self.links.get_mut(peer) {
            None => Err(format!("no peer {peer} to watch")),
            Some(Some(_)) => Err(format!("peer {peer}'s link is already watched")),
            Some(slot) => {
                self.fds.push(link.as_raw_fd());
                *slot = Some(link);
                Ok(())
            }
        }
    }

    /// Whether any peer's connection was made by address.
    pub(crate) fn any(&self) -> bool {
        !self.fds.is_empty()
    }

    /// Whether `peer` has a link.
    pub(crate) fn has(&self, peer: usize) -> bool {
        self.links.get(peer).is_some_and(Option::is_some)
    }

    /// The links' event fds.
    pub(crate) fn fds(&self) -> &[RawFd] {
        &self.fds
    }

    /// Reads every link's pending events; a peer that disconnected (or
    /// whose device went away) is marked gone and `flush`ed once.
    pub(crate) fn check(&self, flush: impl Fn(usize)) {
        for (peer, link) in self.links.iter().enumerate() {
            let Some(link) = link else { continue };
            loop {
                match link.poll_event() {
                    Ok(Some(ev)) => {
                        let kind = ev.event_type();
                        if kind == CmEventType::DISCONNECTED || kind == CmEventType::DEVICE_REMOVAL
                        {
                            if !self.gone[peer].swap(true, Ordering::AcqRel) {
                                tracing::info!(
                                    "peer {peer} at {} disconnected ({kind}); flushing its connection",
                                    link.peer_addr()
                                );
                                flush(peer);
                            }
                        } else {
                            tracing::debug!("peer {peer} at {}: {kind}", link.peer_addr());
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!("reading the events of {}: {e}", link.peer_addr());
                        break;
                    }
                }
            }
        }
    }

    /// [`LinkWatch::check`], at most once per [`CHECK_EVERY`] (for polls
    /// that found nothing: reading the events costs a system call per
    /// link).
    pub(crate) fn check_now_and_then(&self, flush: impl Fn(usize)) {
        let now = u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX);
        let last = self.last_check.load(Ordering::Relaxed);
        let every = CHECK_EVERY.as_micros() as u64;
        if now.saturating_sub(last) >= every
            && self
                .last_check
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.check(flush);
        }
    }

    /// The address of `peer` if it disconnected.
    pub(crate) fn gone(&self, peer: usize) -> Option<SocketAddr> {
        let link = self.links.get(peer)?.as_ref()?;
        self.gone[peer]
            .load(Ordering::Acquire)
            .then(|| link.peer_addr())
    }
}
