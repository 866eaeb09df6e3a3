//! Batches in a scope: they borrow their lease (the segment's bytes) and
//! their prepared list for the scope's `'env`, and the scope completes or
//! flushes every run before it returns, so nothing the device touches is
//! given back early.

use std::cell::RefCell;
use std::time::Duration;

use ferrovia_channel::engine::ChannelCore;
use ferrovia_channel::transport::OpKind;
use ferrovia_channel::{
    Lease, MultiChannel, PieceTicket, PollingScope, ScopeTarget, TransportError,
};

use crate::batch::{Flight, Op, Poster, Report};
use crate::error::TransferError;
use crate::prepare::PreparedList;
use crate::state::EngineState;

/// A scope over every rail of an engine (see
/// [`TransferEngine::scope`](crate::TransferEngine::scope)).
pub struct TransferScope<'s, 'scope, 'env> {
    ps: RefCell<&'s mut PollingScope<'scope, 'env, MultiChannel>>,
    eng: &'env EngineState,
}

impl<'s, 'scope, 'env> TransferScope<'s, 'scope, 'env> {
    pub(crate) fn new(
        ps: RefCell<&'s mut PollingScope<'scope, 'env, MultiChannel>>,
        eng: &'env EngineState,
    ) -> Self {
        TransferScope { ps, eng }
    }

    /// Submits `prepared` as `op` on the bytes `lease` lends (exclusively
    /// for reads), with an optional notification each target gets once
    /// every piece of the batch to it has landed. Checked first: the
    /// operation's remote rights, the lease. Nothing is waited for yet.
    pub fn submit(
        &self,
        prepared: &'env PreparedList,
        lease: &'env Lease<'env>,
        op: Op,
        notify: Option<&[u8]>,
    ) -> Result<ScopedBatch<'_, 's, 'scope, 'env>, TransferError> {
        let mut flight = Flight::start(self.eng, prepared, op, notify, lease)?;
        let mut poster = ScopePoster {
            ps: &self.ps,
            prepared,
            lease,
        };
        // The first runs leave now.
        flight.step(
            self.eng,
            prepared,
            &mut poster,
            ferrovia_types::deadline_after(self.eng.timeout),
        );
        Ok(ScopedBatch {
            scope: self,
            prepared,
            lease,
            flight: Some(flight),
        })
    }
}

struct ScopePoster<'a, 's, 'scope, 'env> {
    ps: &'a RefCell<&'s mut PollingScope<'scope, 'env, MultiChannel>>,
    prepared: &'env PreparedList,
    lease: &'env Lease<'env>,
}

impl Poster for ScopePoster<'_, '_, '_, '_> {
    fn core(&self) -> &ChannelCore {
        // The scope's target lives for 'env, beyond this borrow.
        self.ps.borrow().target().core()
    }

    fn post(
        &mut self,
        rail: usize,
        vpeer: usize,
        range: std::ops::Range<usize>,
        kind: OpKind,
    ) -> Result<PieceTicket, TransportError> {
        let pieces = self.prepared.rail_pieces(rail, vpeer)?;
        self.ps
            .borrow_mut()
            .post_pieces(pieces, vpeer, range, kind, self.lease)
    }
}

/// A batch in a scope; [`ScopedBatch::wait`] for it. Dropping it before it
/// ended gives up its tickets: the scope still completes or flushes its
/// runs before it returns.
pub struct ScopedBatch<'t, 's, 'scope, 'env> {
    scope: &'t TransferScope<'s, 'scope, 'env>,
    prepared: &'env PreparedList,
    lease: &'env Lease<'env>,
    flight: Option<Flight>,
}

impl std::fmt::Debug for ScopedBatch<'_, '_, '_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopedBatch")
            .field("batch", &self.flight.as_ref().map(|fl| fl.id))
            .field("ended", &self.flight.is_none())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for TransferScope<'_, '_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransferScope").finish_non_exhaustive()
    }
}

impl ScopedBatch<'_, '_, '_, '_> {
    /// Waits up to `timeout` for the batch: its report, or the error that
    /// ended it (naming the entry, peer and rail), or a timeout (it goes
    /// on: wait again).
    pub fn wait(&mut self, timeout: Duration) -> Result<Report, TransferError> {
        let Some(flight) = self.flight.as_mut() else {
            return Err(TransferError::Mismatch("the batch has ended".into()));
        };
        let mut poster = ScopePoster {
            ps: &self.scope.ps,
            prepared: self.prepared,
            lease: self.lease,
        };
        let r = flight.wait(
            self.scope.eng,
            self.prepared,
            &mut poster,
            ferrovia_types::deadline_after(timeout),
        );
        if !matches!(r, Err(TransferError::Timeout { .. })) {
            self.flight = None;
        }
        r
    }
}

impl Drop for ScopedBatch<'_, '_, '_, '_> {
    fn drop(&mut self) {
        if let Some(mut flight) = self.flight.take() {
            let core = self.scope.ps.borrow().target().core();
            flight.give_up(self.prepared, core);
        }
    }
}
