//! The client of librdmacm's `rdma_server`/`rdma_client` exchange, written
//! with ferrovia's connection manager: connects to a server by address
//! (port 7471), sends 16 bytes, and expects 16 bytes back. Works with the
//! C `rdma_server` and with `cm_server`.
//!
//! Usage: `cm_client -s SERVER [-p PORT] [-t SECONDS]` (SERVER is an
//! address or a host name). On a machine without RDMA hardware, run it
//! inside `cargo xtask vm`.

use std::error::Error;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use ferrovia_verbs::cm::CmConnector;
use ferrovia_verbs::{
    AccessFlags, MemoryRegion, ProtectionDomain, RecvWr, SendWr, Sge, WorkCompletion,
};

/// The message size of `rdma_server` and `rdma_client`.
const MSG: usize = 16;

/// A registered buffer; the MR field drops before the memory.
struct Buf {
    mr: MemoryRegion,
    data: Vec<u8>,
}

impl Buf {
    fn new(pd: &ProtectionDomain, len: usize) -> Result<Buf, Box<dyn Error>> {
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

fn connector(server: &str, port: u16) -> Result<CmConnector, Box<dyn Error>> {
    Ok(match server.parse::<IpAddr>() {
        Ok(ip) => CmConnector::new(SocketAddr::new(ip, port)),
        Err(_) => CmConnector::to_host(&format!("{server}:{port}"))?,
    })
}

fn main() -> Result<(), Box<dyn Error>> {
    let (mut server, mut port, mut secs) = (None, 7471u16, 30u64);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "-s" => server = Some(value()?),
            "-p" => port = value()?.parse()?,
            "-t" => secs = value()?.parse()?,
            _ => {
                return Err(format!(
                    "usage: cm_client -s SERVER [-p PORT] [-t SECONDS] (got {flag})"
                )
                .into());
            }
        }
    }
    let server = server.ok_or("usage: cm_client -s SERVER [-p PORT] [-t SECONDS]")?;
    let t = Duration::from_secs(secs);

    let resolved = connector(&server, port)?.resolve(t)?;
    let addr = resolved.peer_addr();
    // The QP is in INIT: the receive for the answer goes first.
    let res = resolved.create_resources()?;
    let inbox = Buf::new(&res.pd, MSG)?;
    let rs = [inbox.sge()];
    // SAFETY: registered, untouched until its completion below.
    unsafe { res.qp.post_recv(&mut RecvWr::new(1, &rs))? };
    let conn = resolved.connect(res, &[], t)?;
    println!(
        "cm_client: connected to {addr} from {} on {} port {}",
        conn.link().local_addr(),
        conn.link().device_name(),
        conn.link().port_num()
    );

    let mut msg = Buf::new(conn.pd(), MSG)?;
    msg.data.copy_from_slice(b"ferrovia-client!");
    let ss = [msg.sge()];
    // SAFETY: registered, untouched until its completion below.
    unsafe { conn.qp().post_send(&mut SendWr::send(2, &ss))? };
    // The send's and the receive's completions, in either order.
    let deadline = Instant::now() + t;
    let (mut sent, mut received) = (false, None);
    while !sent || received.is_none() {
        let mut wc = [WorkCompletion::default()];
        conn.cq()
            .wait(&mut wc, deadline.saturating_duration_since(Instant::now()))?;
        wc[0].result()?;
        match wc[0].wr_id() {
            1 => received = Some(wc[0].byte_len()),
            _ => sent = true,
        }
    }
    let len = received.unwrap_or_default() as usize;
    if len != MSG {
        return Err(format!("{addr} answered {len} bytes, not {MSG}").into());
    }
    println!(
        "cm_client: sent {MSG} bytes to {addr}, received {MSG} bytes {:02x?}",
        inbox.data
    );
    conn.disconnect()?;
    Ok(())
}
