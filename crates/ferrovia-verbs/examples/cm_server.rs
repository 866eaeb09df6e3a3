//! The server of librdmacm's `rdma_server`/`rdma_client` exchange, written
//! with ferrovia's connection manager: listens on port 7471, accepts a
//! client, receives its 16 bytes and answers with 16 bytes, then waits for
//! the client to disconnect. Works with the C `rdma_client` and with
//! `cm_client`.
//!
//! Usage: `cm_server [-a ADDR] [-p PORT] [-n CLIENTS] [-t SECONDS]`
//! (default: every address, port 7471, one client, 30 s per wait). On a
//! machine without RDMA hardware, run it inside `cargo xtask vm`.

use std::error::Error;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use ferrovia_verbs::cm::CmListener;
use ferrovia_verbs::{
    AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, RecvWr, SendWr, Sge,
    WorkCompletion,
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

/// Waits for the completion of `wr_id`; fails on an error status.
fn complete(
    cq: &CompletionQueue,
    wr_id: u64,
    t: Duration,
) -> Result<WorkCompletion, Box<dyn Error>> {
    let mut wc = [WorkCompletion::default()];
    cq.wait(&mut wc, t)?;
    wc[0].result()?;
    if wc[0].wr_id() != wr_id {
        return Err(format!("expected completion {wr_id}, got {}", wc[0].wr_id()).into());
    }
    Ok(wc[0])
}

struct Args {
    addr: IpAddr,
    port: u16,
    clients: u32,
    timeout: Duration,
}

fn args() -> Result<Args, Box<dyn Error>> {
    let mut a = Args {
        addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        port: 7471,
        clients: 1,
        timeout: Duration::from_secs(30),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "-a" => a.addr = value()?.parse()?,
            "-p" => a.port = value()?.parse()?,
            "-n" => a.clients = value()?.parse()?,
            "-t" => a.timeout = Duration::from_secs(value()?.parse()?),
            _ => {
                return Err(format!(
                    "usage: cm_server [-a ADDR] [-p PORT] [-n CLIENTS] [-t SECONDS] (got {flag})"
                )
                .into());
            }
        }
    }
    Ok(a)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = args()?;
    let t = args.timeout;
    let listener = CmListener::bind(SocketAddr::new(args.addr, args.port))?;
    println!("cm_server: listening on {}", listener.local_addr());
    for _ in 0..args.clients {
        let request = listener.accept(t)?;
        let peer = request.peer_addr();
        // The QP reaches RTS before the accept, so the receive is posted
        // before the client can send (as rdma_server does).
        let res = request.create_resources()?;
        let inbox = Buf::new(&res.pd, MSG)?;
        let rs = [inbox.sge()];
        // SAFETY: registered, untouched until its completion below.
        unsafe { res.qp.post_recv(&mut RecvWr::new(1, &rs))? };
        let conn = request.accept_with(res, &[], t)?;
        let got = complete(conn.cq(), 1, t)?;
        if got.byte_len() as usize != MSG {
            return Err(format!("{peer} sent {} bytes, not {MSG}", got.byte_len()).into());
        }
        let mut reply = Buf::new(conn.pd(), MSG)?;
        reply.data.copy_from_slice(b"ferrovia-server!");
        let ss = [reply.sge()];
        // SAFETY: registered, untouched until its completion below.
        unsafe { conn.qp().post_send(&mut SendWr::send(2, &ss))? };
        complete(conn.cq(), 2, t)?;
        println!(
            "cm_server: {peer}: received {MSG} bytes {:02x?}, answered {MSG} bytes",
            inbox.data
        );
        // The client disconnects once it has the answer.
        match conn.link().wait_disconnected(t) {
            Ok(()) => println!("cm_server: {peer} disconnected"),
            Err(e) => eprintln!("cm_server: {peer} did not disconnect: {e}"),
        }
    }
    Ok(())
}
