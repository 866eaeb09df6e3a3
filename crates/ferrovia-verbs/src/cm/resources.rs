//! The verbs objects of one connection made by the connection manager:
//! a protection domain, a completion queue and an RC queue pair on the
//! device and port the address is reached through.

use std::net::SocketAddr;

use crate::cm::error::{CmError, CmResult};
use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::pd::ProtectionDomain;
use crate::qp::{QpCaps, QueuePair};

/// A protection domain, a completion queue (with a completion channel, so
/// [`CompletionQueue::wait`] sleeps) and an RC queue pair whose send and
/// receive completions both go to it: what a channel needs for one peer.
///
/// Each object keeps its parents alive, so the fields may be moved out
/// and dropped in any order.
#[derive(Debug)]
pub struct CmResources {
    /// The queue pair.
    pub qp: QueuePair,
    /// Its completion queue (sends and receives).
    pub cq: CompletionQueue,
    /// Its protection domain: register the connection's memory here.
    pub pd: ProtectionDomain,
}

/// How the resources of a connection are made.
#[derive(Debug, Clone, Default)]
pub(crate) struct ResourceOptions {
    /// Use this PD (it must be on the device the address resolves to).
    pub(crate) pd: Option<ProtectionDomain>,
    pub(crate) caps: QpCaps,
}

impl ResourceOptions {
    /// Makes the objects on `device` port `port`, in `pd` if given (else a
    /// new PD on a context opened for the device).
    pub(crate) fn create(
        &self,
        pd: Option<&ProtectionDomain>,
        device: &str,
        port: u8,
        addr: SocketAddr,
    ) -> CmResult<CmResources> {
        let verbs = |source| CmError::Verbs { addr, source };
        let pd = match pd.or(self.pd.as_ref()) {
            Some(pd) => pd.clone(),
            None => ProtectionDomain::new(&Context::open(device).map_err(verbs)?).map_err(verbs)?,
        };
        let ctx = pd.context();
        if ctx.name() != device {
            return Err(CmError::DeviceMismatch {
                addr,
                cm_device: device.to_owned(),
                cm_port: port,
                qp_device: ctx.name().to_owned(),
                qp_port: port,
            });
        }
        let depth = self
            .caps
            .max_send_wr
            .saturating_add(self.caps.max_recv_wr)
            .max(1);
        let cq = CompletionQueue::with_channel(&ctx, depth).map_err(verbs)?;
        let qp = QueuePair::builder(&pd, &cq, &cq)
            .caps(self.caps)
            .port(port)
            .build()
            .map_err(verbs)?;
        Ok(CmResources { qp, cq, pd })
    }
}
