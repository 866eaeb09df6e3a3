//! Loopback RC ping-pong on one RDMA device: two queue pairs connected to
//! each other bounce a message back and forth and report the round-trip
//! time. On a machine without RDMA hardware run it with
//! `cargo xtask demo` (it boots a soft-RoCE VM).
//!
//! Usage: `rc_pingpong [ITERATIONS] [SIZE]` (default 1000 × 64 B); the
//! device is `FERROVIA_DEVICE` or the first one with an active port.

use std::time::{Duration, Instant};

use ferrovia_verbs::{
    AccessFlags, CompletionQueue, ConnectOptions, Context, MemoryRegion, ProtectionDomain,
    QueuePair, RecvWr, SendWr, Sge, VerbsError, WorkCompletion,
};

/// A registered buffer; the MR field drops before the memory.
struct Buf {
    mr: MemoryRegion,
    data: Vec<u8>,
}

impl Buf {
    fn new(pd: &ProtectionDomain, len: usize) -> Result<Buf, VerbsError> {
        let mut data = vec![0u8; len];
        // SAFETY: `data` lives in the same struct and is dropped after the
        // MR; it is only touched between completions.
        let mr = unsafe {
            MemoryRegion::register(pd, data.as_mut_ptr(), len, AccessFlags::LOCAL_WRITE)?
        };
        Ok(Buf { mr, data })
    }

    fn sge(&self) -> Sge {
        Sge::new(
            self.data.as_ptr() as u64,
            self.data.len() as u32,
            self.mr.lkey(),
        )
    }
}

fn wait_ok(
    cq: &CompletionQueue,
    wc: &mut [WorkCompletion; 1],
) -> Result<WorkCompletion, VerbsError> {
    cq.wait(wc, Duration::from_secs(10))?;
    wc[0].result()?;
    Ok(wc[0])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let iters: u32 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(1000);
    let size: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(64);
    if size == 0 || iters == 0 {
        return Err("ITERATIONS and SIZE must be positive".into());
    }

    let ctx = Context::open_default()?;
    let pd = ProtectionDomain::new(&ctx)?;
    let (cq_a, cq_b) = (
        CompletionQueue::with_channel(&ctx, 64)?,
        CompletionQueue::with_channel(&ctx, 64)?,
    );
    let a = QueuePair::builder(&pd, &cq_a, &cq_a).build()?;
    let b = QueuePair::builder(&pd, &cq_b, &cq_b).build()?;
    a.connect(&b.endpoint(), &ConnectOptions::default())?;
    b.connect(&a.endpoint(), &ConnectOptions::default())?;
    let port = a.port();
    let gid = a
        .gid()
        .map(|g| format!("{} ({:?}, index {})", g.gid, g.gid_type, g.index));
    println!(
        "rc_pingpong: device {} port {} ({:?}, MTU {}), GID {}",
        ctx.name(),
        port.port,
        port.link_layer,
        port.active_mtu.bytes(),
        gid.as_deref().unwrap_or("none (LID routing)")
    );
    println!(
        "rc_pingpong: QP {} <-> QP {} connected",
        a.qp_num(),
        b.qp_num()
    );

    let (mut ping_tx, ping_rx) = (Buf::new(&pd, size)?, Buf::new(&pd, size)?);
    let (mut pong_tx, mut pong_rx) = (Buf::new(&pd, size)?, Buf::new(&pd, size)?);
    let mut wc = [WorkCompletion::default()];
    let start = Instant::now();
    for i in 0..iters {
        ping_tx.data.fill(i as u8);
        let (rs, ss) = ([ping_rx.sge()], [ping_tx.sge()]);
        // SAFETY: registered buffers, untouched until their completions.
        unsafe {
            b.post_recv(&mut RecvWr::new(1, &rs))?;
            a.post_send(&mut SendWr::send(2, &ss))?;
        }
        wait_ok(&cq_a, &mut wc)?;
        wait_ok(&cq_b, &mut wc)?;
        pong_tx.data.copy_from_slice(&ping_rx.data);
        let (rs, ss) = ([pong_rx.sge()], [pong_tx.sge()]);
        // SAFETY: as above.
        unsafe {
            a.post_recv(&mut RecvWr::new(3, &rs))?;
            b.post_send(&mut SendWr::send(4, &ss))?;
        }
        wait_ok(&cq_b, &mut wc)?;
        wait_ok(&cq_a, &mut wc)?;
        if pong_rx.data.iter().any(|&x| x != i as u8) {
            return Err(format!("iteration {i}: the pong did not carry the ping's bytes").into());
        }
        pong_rx.data.fill(0);
    }
    let took = start.elapsed();
    println!(
        "rc_pingpong: {iters} round trips of {size} B in {:.3} s: {:.1} µs per round trip, data verified",
        took.as_secs_f64(),
        took.as_secs_f64() * 1e6 / f64::from(iters)
    );
    Ok(())
}
