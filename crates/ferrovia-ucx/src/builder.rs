//! Building a [`UcxTransport`]: depths, the shared pool, peer failure
//! detection, the revocation bound; `start` spawns its progress thread.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::context::UcxContext;
use crate::engine::{self, Shared};
use crate::error::UcxError;
use crate::keys::KeyDirectory;
use crate::transport::UcxTransport;

/// How long dropping a registration waits, by default, for the peers that
/// fetched its key to acknowledge the revocation.
const DEFAULT_REVOCATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Builds a [`UcxTransport`].
#[derive(Debug, Clone)]
pub struct UcxTransportBuilder {
    send_depth: u32,
    recv_depth: u32,
    shared_receives: u32,
    detect_failures: Option<bool>,
    revocation_timeout: Duration,
}

// The transport's constructors live with its builder, so the transport
// needs nothing of the builder's.
impl UcxTransport {
    /// A builder.
    pub fn builder() -> UcxTransportBuilder {
        UcxTransportBuilder::default()
    }

    /// A transport with default depths on `context`.
    pub fn new(context: &UcxContext) -> Result<UcxTransport, UcxError> {
        Self::builder().start(context)
    }
}

impl Default for UcxTransportBuilder {
    fn default() -> Self {
        UcxTransportBuilder {
            send_depth: 256,
            recv_depth: 256,
            shared_receives: 0,
            detect_failures: None,
            revocation_timeout: DEFAULT_REVOCATION_TIMEOUT,
        }
    }
}

/// Whether `UCX_TLS` names only transports without peer failure handling
/// in UCX 1.13 (shared memory and self).
fn shared_memory_only(tls: Option<&str>) -> bool {
    const NO_PEER_FAILURE: &[&str] =
        &["sm", "shm", "posix", "sysv", "xpmem", "cma", "knem", "self"];
    tls.is_some_and(|t| {
        let names: Vec<&str> = t
            .trim_start_matches('^')
            .split(',')
            .map(str::trim)
            .collect();
        !t.starts_with('^') && names.iter().all(|n| NO_PEER_FAILURE.contains(n))
    })
}

impl UcxTransportBuilder {
    /// Operations outstanding per peer in each direction (default 256).
    pub fn depths(mut self, send: u32, recv: u32) -> Self {
        self.send_depth = send.max(1);
        self.recv_depth = recv.max(1);
        self
    }

    /// A shared receive pool of `n` receives that take any peer's message
    /// (wildcard tag receives; the sender comes from the tag), instead of
    /// receives per peer (default 0: none). See
    /// `ChannelBuilder::shared_receives`.
    pub fn shared_receives(mut self, n: u32) -> Self {
        self.shared_receives = n;
        self
    }

    /// Whether endpoints use UCX peer error handling, so a dead peer fails
    /// its work at once (default: yes, unless `UCX_TLS` names only shared
    /// memory and self, which have none in UCX 1.13; a transport without it
    /// also turns it off). Without it a dead peer surfaces as a wait
    /// timeout and the scope's flush.
    pub fn detect_peer_failure(mut self, on: bool) -> Self {
        self.detect_failures = Some(on);
        self
    }

    /// How long dropping a registration waits for every peer that fetched
    /// its key to acknowledge the revocation (default 5 s). A peer that
    /// has not answered by then gets its endpoint force-closed (its
    /// pending work fails) and a warning naming it; then the memory is
    /// unmapped.
    pub fn revocation_timeout(mut self, timeout: Duration) -> Self {
        self.revocation_timeout = timeout;
        self
    }

    /// Starts the progress thread and its worker on `context`.
    pub fn start(self, context: &UcxContext) -> Result<UcxTransport, UcxError> {
        let shared = Arc::new(Shared::new());
        let dir = Arc::new(KeyDirectory::new(self.revocation_timeout));
        let detect = self
            .detect_failures
            .unwrap_or_else(|| !shared_memory_only(std::env::var("UCX_TLS").ok().as_deref()));
        let (thread, engine, address) =
            engine::spawn(context, dir.clone(), shared.clone(), detect)?;
        dir.set_driver(Box::new(engine::EngineDriver::new(&shared, &engine)));
        Ok(UcxTransport {
            shared,
            engine,
            thread: Some(thread),
            address,
            context: context.clone(),
            dir,
            peers: OnceLock::new(),
            peer_addr: None,
            send_depth: self.send_depth,
            recv_depth: self.recv_depth,
            shared_receives: self.shared_receives,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::shared_memory_only;

    #[test]
    fn shared_memory_configurations_are_recognised() {
        assert!(shared_memory_only(Some("sm,self")));
        assert!(shared_memory_only(Some("posix, sysv,cma")));
        assert!(!shared_memory_only(Some("tcp")));
        assert!(!shared_memory_only(Some("sm,tcp")));
        assert!(!shared_memory_only(Some("^tcp")));
        assert!(!shared_memory_only(None));
    }
}
