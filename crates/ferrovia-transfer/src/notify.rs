//! Notifications: a small message a batch's target gets only after every
//! piece of the batch has landed in its memory, whichever rails carried
//! them. One-sided, so a target posts nothing and a scope over the rails
//! has nothing to wait for: each rank keeps a ring of slots per sender in
//! memory peers write; a sender writes a slot's record once every run of
//! the batch to that target has completed (RC completion: the data is in
//! the target's memory), then, once that write has completed, the slot's
//! sequence number. The target polls the sequence numbers and says how
//! far it has read in a word of the sender's region, which a sender reads
//! before it reuses a slot.
//!
//! ```text
//! region of one sender: SLOTS slots of SLOT bytes, then the consumed count (u64)
//! slot: seq:u64 (written last)  batch:u64  len:u8  data[len <= 64]
//! ```

use std::ops::Range;
use std::task::Waker;
use std::time::{Duration, Instant};

use ferrovia_channel::OwnedBuf;
use ferrovia_channel::engine::{ChannelCore, OwnedOp, OwnedPoll, Refused};
use ferrovia_mr::{MrRegistry, RegisterOptions, RegisteredBuffer, Shared};
use ferrovia_types::WcClass;

use crate::error::TransferError;
use crate::segment::{RemoteSegment, Segment};

/// The longest notification.
pub const NOTIFY_MAX: usize = 64;
/// Slots per sender.
const SLOTS: u64 = 16;
/// Bytes of a slot.
const SLOT: usize = 128;
/// Bytes of one sender's region: its slots and its consumed count.
const REGION: usize = SLOTS as usize * SLOT + 64;
/// Where a record's fields start in a slot.
const BATCH_AT: usize = 8;
const LEN_AT: usize = 16;
const DATA_AT: usize = 17;

/// A notification a peer's batch carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// The sender (its rank).
    pub peer: usize,
    /// The batch's id on the sender (`Report::batch`).
    pub batch: u64,
    /// What it carried (at most [`NOTIFY_MAX`] bytes).
    pub data: Vec<u8>,
}

/// The rings, this rank's and its peers'.
pub(crate) struct Notifier {
    me: usize,
    ring: Segment<Shared>,
    remotes: Vec<RemoteSegment>,
    /// Per target: the next sequence number to write, and how many it
    /// last said it had read.
    next: Vec<u64>,
    consumed: Vec<u64>,
    /// Per sender: the next sequence number to read.
    expected: Vec<u64>,
    /// Per rail: staging buffers for the records' writes and the
    /// consumed counts' reads (owned requests take them by value).
    staging: Vec<Vec<RegisteredBuffer>>,
}

impl Notifier {
    /// This rank's ring, registered on every rail (`registries`), for
    /// `peers` senders; the peers' rings come with [`Notifier::connect`].
    pub(crate) fn new(
        me: usize,
        peers: usize,
        registries: &[MrRegistry],
    ) -> Result<Notifier, TransferError> {
        let ring = Segment::alloc(
            registries,
            peers * REGION,
            RegisterOptions::local()
                .allow_remote_write()
                .allow_remote_read(),
        )?;
        let staging = registries
            .iter()
            .map(|r| {
                (0..4)
                    .map(|_| r.alloc(SLOT, RegisterOptions::local()))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Notifier {
            me,
            ring,
            remotes: Vec::new(),
            next: vec![1; peers],
            consumed: vec![0; peers],
            expected: vec![1; peers],
            staging,
        })
    }

    /// This rank's ring, for the peers.
    pub(crate) fn remote(&self) -> Result<RemoteSegment, TransferError> {
        self.ring.remote()
    }

    /// Every rank's ring (index = rank).
    pub(crate) fn connect(&mut self, remotes: Vec<RemoteSegment>) {
        self.remotes = remotes;
    }

    /// The next notification that arrived, if any (from any sender, in
    /// each sender's order).
    pub(crate) fn poll(&mut self) -> Result<Option<Notification>, TransferError> {
        let peers = self.expected.len();
        for p in 0..peers {
            let seq = self.expected[p];
            let slot = p * REGION + ((seq - 1) % SLOTS) as usize * SLOT;
            if self.ring.buffer().load_u64(slot)? != seq {
                continue;
            }
            let mut head = [0u8; DATA_AT];
            self.ring.buffer().read_into(slot, &mut head)?;
            let batch = u64::from_le_bytes(head[BATCH_AT..LEN_AT].try_into().unwrap_or_default());
            let len = usize::from(head[LEN_AT]).min(NOTIFY_MAX);
            let mut data = vec![0u8; len];
            self.ring.buffer().read_into(slot + DATA_AT, &mut data)?;
            self.expected[p] = seq + 1;
            // Read: the sender may reuse the slot.
            self.ring
                .buffer()
                .store_u64(p * REGION + SLOTS as usize * SLOT, seq)?;
            return Ok(Some(Notification {
                peer: p,
                batch,
                data,
            }));
        }
        Ok(None)
    }

    /// Sends `data` of `batch` to `target`, over the rail `rail` picks
    /// among those that work to it (`rail(None)` first, then
    /// `rail(Some(failed))` after a rail fails, which must not pick it
    /// again), by `deadline`.
    pub(crate) fn send(
        &mut self,
        core: &ChannelCore,
        target: usize,
        batch: u64,
        data: &[u8],
        deadline: Instant,
        mut rail: impl FnMut(Option<usize>) -> Option<usize>,
    ) -> Result<(), TransferError> {
        // One ring per peer, so the rail's virtual peer is rail * peers + target.
        let peers = self.next.len();
        if data.len() > NOTIFY_MAX {
            return Err(TransferError::NotificationTooLong {
                len: data.len(),
                max: NOTIFY_MAX,
            });
        }
        let seq = self.next[target];
        let mut failed = None;
        loop {
            let Some(r) = rail(failed) else {
                // The batch names the entry (none left: the list's length).
                return Err(TransferError::PeerUnreachable {
                    peer: target,
                    entry: 0,
                    last: None,
                });
            };
            match self.send_over(
                core,
                r,
                r * peers + target,
                target,
                seq,
                batch,
                data,
                deadline,
            ) {
                Ok(()) => {
                    self.next[target] = seq + 1;
                    return Ok(());
                }
                Err(e) if rail_failure(&e) => failed = Some(r),
                Err(e) => return Err(e),
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn send_over(
        &mut self,
        core: &ChannelCore,
        rail: usize,
        vpeer: usize,
        target: usize,
        seq: u64,
        batch: u64,
        data: &[u8],
        deadline: Instant,
    ) -> Result<(), TransferError> {
        let theirs = self
            .remotes
            .get(target)
            .and_then(|s| s.rail(rail))
            .ok_or_else(|| {
                TransferError::Mismatch(format!("no ring of peer {target} on rail {rail}"))
            })?;
        let mine = self.me * REGION;
        // A slot is reused only once the target has read what it held.
        while seq > self.consumed[target] + SLOTS {
            let buf = self.take(rail)?;
            let word = theirs.sub_region((mine + SLOTS as usize * SLOT) as u64, 8)?;
            let buf = round_trip(core, OwnedOp::read(vpeer, buf, 0..8, word), deadline)?;
            self.consumed[target] = u64::from_le_bytes(buf[..8].try_into().unwrap_or_default());
            self.staging[rail].push(buf);
            if seq > self.consumed[target] + SLOTS {
                if Instant::now() >= deadline {
                    return Err(TransferError::Timeout {
                        pending: 1,
                        total: 1,
                        after: Duration::ZERO,
                    });
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        let slot = (mine + ((seq - 1) % SLOTS) as usize * SLOT) as u64;
        let mut buf = self.take(rail)?;
        buf[BATCH_AT..LEN_AT].copy_from_slice(&batch.to_le_bytes());
        buf[LEN_AT] = data.len() as u8;
        buf[DATA_AT..DATA_AT + data.len()].copy_from_slice(data);
        let record: Range<usize> = BATCH_AT..DATA_AT + data.len();
        let to = theirs.sub_region(slot + BATCH_AT as u64, record.len() as u64)?;
        let mut buf = round_trip(
            core,
            OwnedOp::write(vpeer, OwnedBuf::Plain(buf), record, to),
            deadline,
        )?;
        // The record has landed: now its sequence number.
        buf[..8].copy_from_slice(&seq.to_le_bytes());
        let to = theirs.sub_region(slot, 8)?;
        let buf = round_trip(
            core,
            OwnedOp::write(vpeer, OwnedBuf::Plain(buf), 0..8, to),
            deadline,
        )?;
        self.staging[rail].push(buf);
        Ok(())
    }

    /// A staging buffer of `rail`.
    fn take(&mut self, rail: usize) -> Result<RegisteredBuffer, TransferError> {
        self.staging
            .get_mut(rail)
            .and_then(Vec::pop)
            .ok_or_else(|| {
                TransferError::Mismatch(format!("no staging buffer left on rail {rail}"))
            })
    }
}

/// Whether `e` means the rail's connection failed (try another one).
pub(crate) fn rail_failure(e: &TransferError) -> bool {
    match e {
        TransferError::Transport(ferrovia_channel::TransportError::Completion(c)) => matches!(
            c.status.class(),
            WcClass::RetryExceeded | WcClass::Flushed | WcClass::Fatal | WcClass::ReceiverNotReady
        ),
        TransferError::Transport(
            ferrovia_channel::TransportError::Broken { .. }
            | ferrovia_channel::TransportError::Disconnected { .. },
        ) => true,
        _ => false,
    }
}

/// Posts one owned request and waits for it by `deadline`; its buffer back.
pub(crate) fn round_trip(
    core: &ChannelCore,
    mut op: OwnedOp,
    deadline: Instant,
) -> Result<RegisteredBuffer, TransferError> {
    let waker = Waker::noop();
    let mut ticket = loop {
        match core.try_post_owned(op, Some(waker)) {
            Ok(t) => break t,
            Err(Refused::Full(again)) => {
                op = again;
                core.progress()?;
                if Instant::now() >= deadline {
                    return Err(TransferError::Timeout {
                        pending: 1,
                        total: 1,
                        after: Duration::ZERO,
                    });
                }
            }
            Err(Refused::Failed(e, _)) => return Err(e.into()),
        }
    };
    loop {
        core.progress()?;
        match core.poll_owned(ticket, waker) {
            OwnedPoll::Ready(c, buf) => {
                let OwnedBuf::Plain(buf) = buf else {
                    return Err(TransferError::Mismatch(
                        "a staging buffer came back changed".into(),
                    ));
                };
                if !c.status.is_success() {
                    let mut e =
                        ferrovia_types::CompletionError::new(c.wr_id, c.status, c.vendor_err);
                    if let Some(p) = c.peer {
                        e = e.with_peer(p as usize);
                    }
                    return Err(ferrovia_channel::TransportError::Completion(e).into());
                }
                return Ok(buf);
            }
            OwnedPoll::Pending(t) => ticket = t,
            OwnedPoll::Gone => {
                return Err(TransferError::Mismatch(
                    "a notification request was collected by a scope".into(),
                ));
            }
        }
        if Instant::now() >= deadline {
            core.abandon_owned(ticket);
            return Err(TransferError::Timeout {
                pending: 1,
                total: 1,
                after: Duration::ZERO,
            });
        }
        std::hint::spin_loop();
    }
}
