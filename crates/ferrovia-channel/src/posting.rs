//! The posts every scope offers, by peer index; the single- and
//! multi-peer APIs are thin layers over these.

use crate::atomic::{AtomicOp, AtomicWorkRequest};
use crate::error::TransportError;
use crate::error::TransportResult;
use crate::op::OpKind;
use crate::post::{AsSpec, SendSpec, read_parts};
use crate::request::{ReadWorkRequest, ReceiveWorkRequest, SendWorkRequest, WriteWorkRequest};
use crate::scope::{PollingScope, ScopeTarget, ScopedPendingWork};
use crate::slots::RawBuf;

impl<'scope, 'env, C: ScopeTarget + ?Sized> PollingScope<'scope, 'env, C> {
    pub(crate) fn send_to(
        &mut self,
        peer: usize,
        wr: SendWorkRequest<'_, 'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        let p = self.core().post_send(peer, &wr.spec(), &[], &[])?;
        Ok(self.posted(p, &[]))
    }

    pub(crate) fn write_to(
        &mut self,
        peer: usize,
        wr: WriteWorkRequest<'_, 'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        let p = self.core().post_send(peer, &wr.spec(), &[], &[])?;
        Ok(self.posted(p, &[]))
    }

    pub(crate) fn receive_from(
        &mut self,
        peer: usize,
        wr: ReceiveWorkRequest<'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        let t = self.core().post_recv(Some(peer), &wr.scatter)?;
        Ok(self.handle(t))
    }

    /// Posts a receive to the shared pool: any peer's next message.
    pub(crate) fn receive_any(
        &mut self,
        wr: ReceiveWorkRequest<'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        let t = self.core().post_recv(None, &wr.scatter)?;
        Ok(self.handle(t))
    }

    pub(crate) fn read_from(
        &mut self,
        peer: usize,
        wr: ReadWorkRequest<'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        let (sges, bufs) = read_parts(&wr.scatter);
        let n = wr.scatter.len;
        let spec = SendSpec {
            kind: OpKind::Read,
            gather: &[],
            remote: Some((wr.remote.addr(), wr.remote.rkey())),
            imm: None,
            operands: (0, 0),
        };
        let p = self.core().post_send(peer, &spec, &bufs[..n], &sges[..n])?;
        Ok(self.posted(p, &bufs[..n]))
    }

    pub(crate) fn atomic_to(
        &mut self,
        peer: usize,
        wr: AtomicWorkRequest<'env>,
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        if !self.core().atomics {
            return Err(TransportError::AtomicsUnsupported { peer });
        }
        let (kind, operands) = match wr.op {
            AtomicOp::FetchAdd { add } => (OpKind::FetchAdd, (add, 0)),
            AtomicOp::CompareSwap { compare, swap } => (OpKind::CompareSwap, (compare, swap)),
        };
        let spec = SendSpec {
            kind,
            gather: &[],
            remote: Some((wr.remote.addr(), wr.remote.rkey())),
            imm: None,
            operands,
        };
        let sge = wr.result.sge;
        let buf = RawBuf {
            ptr: wr.result.ptr,
            sge,
        };
        let p = self.core().post_send(peer, &spec, &[buf], &[sge])?;
        Ok(self.posted(p, &[buf]))
    }

    /// Posts sends or writes to one peer as one list (see
    /// `ChannelCore::post_send_list`); the handle is the last request's.
    pub(crate) fn list_to<W: AsSpec<'env>>(
        &mut self,
        peer: usize,
        wrs: &[W],
    ) -> TransportResult<ScopedPendingWork<'scope, 'env>> {
        let t = self.core().post_send_list(peer, wrs)?;
        Ok(self.handle(t))
    }
}
