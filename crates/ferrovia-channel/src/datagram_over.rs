//! [`ChannelDatagrams`]: datagrams over any channel whose transport has a
//! shared receive pool (UCX's wildcard receives; the verbs backend has a
//! UD queue pair of its own instead). The channel's connections are
//! reliable, so nothing is lost here; what the datagram API promises still
//! holds (the size limit, a cut message reported as such).

use std::collections::VecDeque;
use std::task::Waker;
use std::time::{Duration, Instant};

use ferrovia_mr::{RegisterOptions, RegisteredBuffer};

use crate::MultiChannel;
use crate::datagram::{Datagram, DatagramTransport};
use crate::engine::{OwnedOp, OwnedPoll, OwnedTicket, Refused};
use crate::error::{TransportError, TransportResult};
use crate::owned_buf::OwnedBuf;
use crate::scope::ScopeTarget;

/// Datagrams over a [`MultiChannel`] built with a shared receive pool
/// (`ChannelBuilder::shared_receives`): every pooled receive holds a
/// buffer of the limit's size, a send is copied into a buffer of its own.
/// The channel is taken over (no scope opens on it any more).
pub struct ChannelDatagrams {
    multi: MultiChannel,
    max: usize,
    /// The pooled receives, in posting order (the order they take
    /// messages in).
    posted: VecDeque<OwnedTicket>,
    /// A send buffer not in use.
    spare: Option<RegisteredBuffer>,
}

impl ChannelDatagrams {
    /// Datagrams of at most `max` bytes over `multi`, whose pool is filled
    /// with receives now.
    pub fn new(multi: MultiChannel, max: usize) -> TransportResult<ChannelDatagrams> {
        let depth = multi.core().transport.shared_recv_depth();
        if depth == 0 || max == 0 {
            return Err(TransportError::Config(format!(
                "datagrams over a channel need a shared receive pool and a positive limit ({depth} receives, {max} bytes)"
            )));
        }
        if !multi.core().lock_out_scopes() {
            return Err(TransportError::Config(
                "a scope is open on the channel the datagrams would take over".into(),
            ));
        }
        let mut d = ChannelDatagrams {
            multi,
            max,
            posted: VecDeque::with_capacity(depth as usize),
            spare: None,
        };
        for _ in 0..depth {
            let buf = d.multi.registry().alloc(max, RegisterOptions::local())?;
            d.post_receive(buf)?;
        }
        Ok(d)
    }

    fn post_receive(&mut self, buf: RegisteredBuffer) -> TransportResult<()> {
        let op = OwnedOp::receive_any(buf, 0..self.max);
        let t = self.post(op)?;
        self.posted.push_back(t);
        Ok(())
    }

    fn post(&self, op: OwnedOp) -> TransportResult<OwnedTicket> {
        match self.multi.core().try_post_owned(op, None) {
            Ok(t) => Ok(t),
            Err(Refused::Failed(e, _)) => Err(e),
            Err(Refused::Full(_)) => Err(TransportError::Config(
                "the datagram channel's queue is full".into(),
            )),
        }
    }

    /// Waits for `t` until `deadline`: its completion and buffer, or the
    /// ticket back (timed out).
    fn wait(
        &self,
        mut t: OwnedTicket,
        deadline: Instant,
    ) -> TransportResult<Result<(crate::transport::Completion, OwnedBuf), OwnedTicket>> {
        let core = self.multi.core();
        loop {
            match core.poll_owned(t, Waker::noop()) {
                OwnedPoll::Ready(c, buf) => return Ok(Ok((c, buf))),
                OwnedPoll::Pending(back) => t = back,
                OwnedPoll::Gone => {
                    return Err(TransportError::Config(
                        "a datagram request was settled behind the channel's back".into(),
                    ));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Err(t));
            }
            core.wait_progress(left)?;
        }
    }
}

fn plain(buf: OwnedBuf) -> TransportResult<RegisteredBuffer> {
    match buf {
        OwnedBuf::Plain(b) => Ok(b),
        _ => Err(TransportError::Config(
            "a datagram buffer came back of another kind".into(),
        )),
    }
}

impl DatagramTransport for ChannelDatagrams {
    fn peers(&self) -> usize {
        self.multi.peers()
    }

    fn max_message(&self) -> usize {
        self.max
    }

    fn send_to(&mut self, peer: usize, data: &[u8], timeout: Duration) -> TransportResult<()> {
        if data.is_empty() {
            return Err(TransportError::Config(
                "a datagram needs at least one byte".into(),
            ));
        }
        if data.len() > self.max {
            return Err(TransportError::DatagramTooLong {
                len: data.len(),
                max: self.max,
            });
        }
        let mut buf = match self.spare.take() {
            Some(b) => b,
            None => self
                .multi
                .registry()
                .alloc(self.max, RegisterOptions::local())?,
        };
        buf[..data.len()].copy_from_slice(data);
        let t = self.post(OwnedOp::send(peer, OwnedBuf::Plain(buf), 0..data.len()))?;
        match self.wait(t, ferrovia_types::deadline_after(timeout))? {
            Ok((c, buf)) => {
                self.spare = Some(plain(buf)?);
                if c.status.is_success() {
                    Ok(())
                } else {
                    Err(self.multi.core().failure(&c))
                }
            }
            Err(t) => {
                // The engine keeps the buffer until the send completes.
                self.multi.core().abandon_owned(t);
                Err(TransportError::Timeout {
                    wr_id: 0,
                    peer,
                    after: timeout,
                })
            }
        }
    }

    fn recv_into(
        &mut self,
        out: &mut [u8],
        timeout: Duration,
    ) -> TransportResult<Option<Datagram>> {
        let Some(t) = self.posted.pop_front() else {
            return Err(TransportError::Config("no receive is posted".into()));
        };
        let (c, buf) = match self.wait(t, ferrovia_types::deadline_after(timeout))? {
            Ok(done) => done,
            Err(t) => {
                self.posted.push_front(t);
                return Ok(None);
            }
        };
        let buf = plain(buf)?;
        let from = c.peer.map(|p| p as usize);
        if !c.status.is_success() {
            // A failed receive's byte_len is undefined: nothing to copy.
            self.post_receive(buf)?;
            return Err(self.multi.core().failure(&c));
        }
        let len = c.byte_len as usize;
        let copied = len.min(out.len()).min(buf.len());
        out[..copied].copy_from_slice(&buf[..copied]);
        self.post_receive(buf)?;
        let from = from.ok_or_else(|| {
            TransportError::Config("a pooled receive completed without its sender".into())
        })?;
        Ok(Some(Datagram::new(from, len, copied)))
    }

    fn describe(&self) -> String {
        format!("datagrams over a channel of {} peers", self.multi.peers())
    }
}
