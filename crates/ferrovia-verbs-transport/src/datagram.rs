//! [`VerbsDatagrams`]: the datagram seam over one UD queue pair. Every
//! peer is an address handle made from its GID (or LID) and its queue
//! pair number and Q_Key; receive buffers hold the 40-byte global route
//! header before each message, which is stripped here (and read to name
//! the sender), so the program sees only messages.
//!
//! The memory the device touches is the transport's own: one registered
//! allocation of receive slots (the header's 40 bytes + the limit each)
//! and one send slot, never lent to the program. The queue pair is
//! destroyed before that memory is deregistered and freed (field order),
//! so the device never writes freed memory.

use std::time::{Duration, Instant};

use ferrovia_channel::{Datagram, DatagramTransport, TransportError, TransportResult};
use ferrovia_verbs::{
    AccessFlags, AddressHandle, CompletionQueue, DEFAULT_QKEY, DatagramAddress, GRH_BYTES,
    MemoryRegion, PostPath, ProtectionDomain, QpCaps, QueuePair, RecvWr, SendWr, Sge,
    WorkCompletion, source_gid,
};

use crate::error::from_verbs;

/// How a datagram queue pair is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DatagramOptions {
    /// The Q_Key every message to it must carry (bit 31 clear).
    pub qkey: u32,
    /// The largest message: at most the port's active MTU (default 4096,
    /// so the MTU decides).
    pub max_message: u32,
    /// Receives kept posted (default 256): messages arriving while all
    /// are taken are lost, which is no error.
    pub receives: u32,
    /// Which port (default: the first active one).
    pub port: Option<u8>,
    /// How posts reach the send queue.
    pub post_path: PostPath,
}

impl Default for DatagramOptions {
    fn default() -> Self {
        DatagramOptions {
            qkey: DEFAULT_QKEY,
            max_message: 4096,
            receives: 256,
            port: None,
            post_path: PostPath::Auto,
        }
    }
}

impl DatagramOptions {
    /// Sets the `qkey` field.
    #[must_use]
    pub fn qkey(mut self, qkey: u32) -> Self {
        self.qkey = qkey;
        self
    }

    /// Sets the `max_message` field.
    #[must_use]
    pub fn max_message(mut self, max: u32) -> Self {
        self.max_message = max;
        self
    }

    /// Sets the `receives` field.
    #[must_use]
    pub fn receives(mut self, n: u32) -> Self {
        self.receives = n;
        self
    }
}

/// One peer: where to send, and how to recognise its messages.
struct Peer {
    addr: DatagramAddress,
    ah: AddressHandle,
}

/// Datagrams over one UD queue pair (see the module docs). Made with
/// [`VerbsDatagrams::open`], which gives the address peers need, then
/// [`VerbsDatagrams::connect`] with every peer's.
pub struct VerbsDatagrams {
    // Field order: the queue pair goes first (the device stops touching
    // the slots), then the handles, CQs, the registration, the memory.
    qp: QueuePair,
    peers: Vec<Peer>,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    mr: MemoryRegion,
    slots: Box<[u8]>,
    addr: DatagramAddress,
    receives: usize,
    device: String,
    /// Datagrams from no known peer, dropped.
    strangers: u64,
    next_send: u64,
}

/// Bytes of one receive slot.
fn slot_len(max: usize) -> usize {
    GRH_BYTES + max
}

impl VerbsDatagrams {
    /// A UD queue pair in `pd` with its receives posted: what peers need
    /// to reach it is [`VerbsDatagrams::address`].
    pub fn open(pd: &ProtectionDomain, opts: &DatagramOptions) -> TransportResult<VerbsDatagrams> {
        let ctx = pd.context();
        let receives = opts.receives.max(1);
        let recv_cq = CompletionQueue::with_channel(&ctx, receives).map_err(from_verbs)?;
        let send_cq = CompletionQueue::new(&ctx, 4).map_err(from_verbs)?;
        let caps = QpCaps::default()
            .max_send_wr(2)
            .max_recv_wr(receives)
            .max_send_sge(1)
            .max_recv_sge(1)
            .max_inline_data(0);
        let mut b = QueuePair::builder(pd, &send_cq, &recv_cq)
            .datagram()
            .caps(caps)
            .post_path(opts.post_path);
        if let Some(port) = opts.port {
            b = b.port(port);
        }
        let qp = b.build().map_err(from_verbs)?;
        qp.ready_datagram(opts.qkey).map_err(from_verbs)?;
        let addr = qp.datagram_address(opts.qkey, opts.max_message);
        let max = addr.max_message as usize;
        let receives = receives as usize;
        // The receive slots, then one send slot.
        let total = slot_len(max) * receives + max;
        let mut slots = vec![0u8; total].into_boxed_slice();
        // SAFETY: `slots` is owned by the same value as the registration
        // and dropped after it (field order), and is touched by this
        // process only in slots the device is not using.
        let mr = unsafe {
            MemoryRegion::register(pd, slots.as_mut_ptr(), total, AccessFlags::LOCAL_WRITE)
        }
        .map_err(from_verbs)?;
        let mut d = VerbsDatagrams {
            qp,
            peers: Vec::new(),
            send_cq,
            recv_cq,
            mr,
            slots,
            addr,
            receives,
            device: ctx.name().to_owned(),
            strangers: 0,
            next_send: 0,
        };
        for i in 0..receives {
            d.post_receive(i)?;
        }
        Ok(d)
    }

    /// What a peer needs to send here.
    pub fn address(&self) -> DatagramAddress {
        self.addr
    }

    /// Makes an address handle for every peer (`peers[i]` is peer `i`).
    pub fn connect(&mut self, peers: &[DatagramAddress]) -> TransportResult<()> {
        let pd = self.mr.pd();
        self.peers = peers
            .iter()
            .map(|&addr| {
                Ok(Peer {
                    addr,
                    ah: AddressHandle::new(&pd, &self.qp, &addr).map_err(from_verbs)?,
                })
            })
            .collect::<TransportResult<_>>()?;
        Ok(())
    }

    /// Datagrams that came from no known peer (another job's, with our
    /// Q_Key), dropped.
    pub fn strangers(&self) -> u64 {
        self.strangers
    }

    fn max(&self) -> usize {
        self.addr.max_message as usize
    }

    fn slot_sge(&self, i: usize) -> Sge {
        let len = slot_len(self.max());
        Sge::new(
            self.slots.as_ptr() as u64 + (i * len) as u64,
            len as u32,
            self.mr.lkey(),
        )
    }

    fn post_receive(&mut self, i: usize) -> TransportResult<()> {
        let sge = [self.slot_sge(i)];
        // SAFETY: slot `i` is the transport's own registered memory, which
        // it reads only once this receive completed, and frees only after
        // the queue pair is destroyed.
        unsafe { self.qp.post_recv(&mut RecvWr::new(i as u64, &sge)) }.map_err(from_verbs)
    }

    /// The peer whose queue pair and GID sent `wc` into `slot`, if any.
    fn sender(&self, wc: &WorkCompletion, header: &[u8; GRH_BYTES]) -> Option<usize> {
        let gid = source_gid(header, wc.has_grh());
        self.peers
            .iter()
            .position(|p| p.addr.qpn == wc.src_qp() && gid.is_none_or(|g| g == p.addr.gid))
    }
}

impl DatagramTransport for VerbsDatagrams {
    fn peers(&self) -> usize {
        self.peers.len()
    }

    fn max_message(&self) -> usize {
        self.max()
    }

    fn send_to(&mut self, peer: usize, data: &[u8], timeout: Duration) -> TransportResult<()> {
        let count = self.peers.len();
        let p = self
            .peers
            .get(peer)
            .ok_or(TransportError::NoSuchPeer { peer, count })?;
        // The peer's receive slots bound it too: a longer datagram would
        // fail there (IBV_WC_LOC_LEN_ERR) while this side saw success.
        let max = self.max().min(p.addr.max_message as usize);
        if data.len() > max {
            return Err(TransportError::DatagramTooLong {
                len: data.len(),
                max,
            });
        }
        if data.is_empty() {
            return Err(TransportError::Config(
                "a datagram needs at least one byte".into(),
            ));
        }
        let at = slot_len(max) * self.receives;
        // The send slot is free: the previous send completed before its
        // call returned.
        self.slots[at..at + data.len()].copy_from_slice(data);
        let sge = [Sge::new(
            self.slots.as_ptr() as u64 + at as u64,
            data.len() as u32,
            self.mr.lkey(),
        )];
        self.next_send += 1;
        let id = self.next_send;
        let mut wr = SendWr::datagram(id, &sge, &p.ah, p.addr.qpn, p.addr.qkey);
        // SAFETY: the send slot is the transport's own registered memory,
        // not written again before this send completes (waited for below,
        // or the queue pair is destroyed first).
        unsafe { self.qp.post_send(&mut wr) }.map_err(from_verbs)?;
        let start = Instant::now();
        let mut wc = [WorkCompletion::default()];
        loop {
            if self.send_cq.poll(&mut wc).map_err(from_verbs)? == 1 {
                let wc = wc[0];
                return match wc.result() {
                    Ok(_) => Ok(()),
                    Err(e) => Err(e.with_peer(peer).into()),
                };
            }
            if start.elapsed() >= timeout {
                // The slot stays lent: move the queue pair to the error
                // state so the send completes (flushed) before reuse.
                let _ = self.qp.to_error();
                return Err(TransportError::Timeout {
                    wr_id: id,
                    peer,
                    after: timeout,
                });
            }
            std::thread::yield_now();
        }
    }

    fn recv_into(
        &mut self,
        out: &mut [u8],
        timeout: Duration,
    ) -> TransportResult<Option<Datagram>> {
        let start = Instant::now();
        let mut wcs = [WorkCompletion::default()];
        loop {
            let left = timeout.saturating_sub(start.elapsed());
            let got = self
                .recv_cq
                .wait_or(&mut wcs, left, &[])
                .map_err(from_verbs)?;
            if got == 0 {
                if start.elapsed() >= timeout {
                    return Ok(None);
                }
                continue;
            }
            let wc = wcs[0];
            let slot = wc.wr_id() as usize;
            if slot >= self.receives {
                return Err(TransportError::Config(format!(
                    "a datagram receive completed with an unknown wr_id {}",
                    wc.wr_id()
                )));
            }
            let base = slot * slot_len(self.max());
            let result = wc.result().map(|_| ());
            // Read what arrived, then give the slot back to the device.
            let mut header = [0u8; GRH_BYTES];
            header.copy_from_slice(&self.slots[base..base + GRH_BYTES]);
            // On UD byte_len counts the 40 bytes reserved for the header
            // whether or not one came (the kernel's IPoIB takes them off
            // always), so the message is what follows them.
            let len = (wc.byte_len() as usize)
                .saturating_sub(GRH_BYTES)
                .min(self.max());
            let copied = len.min(out.len());
            let from = self.sender(&wc, &header);
            if result.is_ok() {
                let body = base + GRH_BYTES;
                out[..copied].copy_from_slice(&self.slots[body..body + copied]);
            }
            self.post_receive(slot)?;
            result?;
            match from {
                Some(from) => return Ok(Some(Datagram::new(from, len, copied))),
                None => {
                    self.strangers += 1;
                    tracing::debug!(
                        "{}: a datagram from no known peer (QP {}), dropped",
                        self.device,
                        wc.src_qp()
                    );
                }
            }
        }
    }

    fn describe(&self) -> String {
        format!(
            "verbs datagrams on {} (UD QP {}, {} bytes)",
            self.device, self.addr.qpn, self.addr.max_message
        )
    }
}
