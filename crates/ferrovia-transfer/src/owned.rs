//! Owned batches: the batch holds its prepared list, and every run posted
//! holds the lease (which owns the segment's bytes and keys) until the
//! device is done with it. So dropping or forgetting a batch, or its
//! future, never frees memory a NIC may still touch: dropped, its runs
//! finish on their own and let go of the lease then; forgotten, the lease
//! stays held (leaked) as long as its runs are out.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use ferrovia_channel::engine::ChannelCore;
use ferrovia_channel::transport::OpKind;
use ferrovia_channel::{Lease, PieceTicket, TransportError};

use crate::batch::{Flight, Op, Poster, Report};
use crate::error::{Rejected, TransferError};
use crate::prepare::PreparedList;
use crate::state::EngineState;

/// A batch that holds its list and, through its runs, its lease: wait for
/// it ([`OwnedBatch::wait`]) or await it, then take the list back
/// ([`OwnedBatch::into_list`]) to submit it again.
pub struct OwnedBatch<'e> {
    state: &'e EngineState,
    core: &'e ChannelCore,
    prepared: PreparedList,
    lease: Arc<Lease<'static>>,
    flight: Flight,
    /// The future form's deadline (the engine's timeout from submission).
    deadline: Instant,
}

impl std::fmt::Debug for OwnedBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedBatch")
            .field("batch", &self.flight.id)
            .field("finished", &self.flight.finished())
            .finish_non_exhaustive()
    }
}

struct OwnedPoster<'a> {
    core: &'a ChannelCore,
    prepared: &'a PreparedList,
    lease: &'a Arc<Lease<'static>>,
}

impl Poster for OwnedPoster<'_> {
    fn core(&self) -> &ChannelCore {
        self.core
    }

    fn post(
        &mut self,
        rail: usize,
        vpeer: usize,
        range: std::ops::Range<usize>,
        kind: OpKind,
    ) -> Result<PieceTicket, TransportError> {
        let pieces = self.prepared.rail_pieces(rail, vpeer)?;
        self.core
            .post_pieces_owned(pieces, vpeer, range, kind, self.lease)
    }
}

impl<'e> OwnedBatch<'e> {
    pub(crate) fn start(
        state: &'e EngineState,
        core: &'e ChannelCore,
        prepared: PreparedList,
        lease: Arc<Lease<'static>>,
        op: Op,
        notify: Option<&[u8]>,
    ) -> Result<OwnedBatch<'e>, Rejected> {
        let eng = state;
        let mut flight = match Flight::start(eng, &prepared, op, notify, &lease) {
            Ok(f) => f,
            Err(error) => {
                return Err(Rejected {
                    error,
                    list: Box::new(prepared),
                });
            }
        };
        let deadline = ferrovia_types::deadline_after(eng.timeout);
        let mut poster = OwnedPoster {
            core,
            prepared: &prepared,
            lease: &lease,
        };
        flight.step(eng, &prepared, &mut poster, deadline);
        Ok(OwnedBatch {
            state,
            core,
            prepared,
            lease,
            flight,
            deadline,
        })
    }

    /// Its id (what notifications name).
    pub fn id(&self) -> u64 {
        self.flight.id
    }

    /// Waits up to `timeout`: the report, the error that ended it, or a
    /// timeout (it goes on: wait again).
    pub fn wait(&mut self, timeout: Duration) -> Result<Report, TransferError> {
        let mut poster = OwnedPoster {
            core: self.core,
            prepared: &self.prepared,
            lease: &self.lease,
        };
        self.flight.wait(
            self.state,
            &self.prepared,
            &mut poster,
            ferrovia_types::deadline_after(timeout),
        )
    }

    /// Whether it has ended.
    pub fn is_finished(&self) -> bool {
        self.flight.finished()
    }

    /// The prepared list back once the batch has ended; else the batch.
    // The batch comes back by value, like `Arc::try_unwrap`'s: boxing it
    // would allocate on every submission.
    #[allow(clippy::result_large_err)]
    pub fn into_list(mut self) -> Result<PreparedList, OwnedBatch<'e>> {
        if !self.flight.finished() {
            return Err(self);
        }
        Ok(std::mem::take(&mut self.prepared))
    }
}

impl Drop for OwnedBatch<'_> {
    fn drop(&mut self) {
        if !self.flight.finished() {
            // Its runs hold the lease until the device is done with them.
            self.flight.give_up(&self.prepared, self.core);
        }
    }
}

impl Future for OwnedBatch<'_> {
    type Output = Result<Report, TransferError>;

    /// One look per poll; until the batch ends it asks to be polled again
    /// at once (it polls the rails, yielding to the runtime between looks).
    /// Past the engine's timeout from submission it resolves to a timeout.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut poster = OwnedPoster {
            core: this.core,
            prepared: &this.prepared,
            lease: &this.lease,
        };
        if this
            .flight
            .step(this.state, &this.prepared, &mut poster, this.deadline)
        {
            return Poll::Ready(this.flight.outcome(&this.prepared));
        }
        if Instant::now() >= this.deadline {
            return Poll::Ready(Err(TransferError::Timeout {
                pending: this.flight.pending(&this.prepared),
                total: this.prepared.runs.len(),
                after: this.state.timeout,
            }));
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
