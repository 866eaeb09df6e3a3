//! An async request/response service: rank 0 serves, every other rank is
//! a client with several requests in flight. A request is a small send
//! naming where its payload lies in the client's memory; the server pulls
//! the payload with an RDMA read, answers with a send of its checksum, and
//! the client checks it. Every operation is a future owning its buffer.
//!
//! `cargo run -p ferrovia --features async --example async_service`
//! starts 4 ranks on this machine (over UCX without an RDMA device);
//! under a launcher each process is one rank.

use std::collections::HashMap;
use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrovia::{AsyncNode, Node, RegisterOptions, RegisteredBuffer, RemoteMemoryRegion};
use tokio::sync::oneshot;

type Res<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

const RANKS: usize = 4;
/// Requests each client makes, and how many it keeps in flight.
const REQUESTS: u64 = 200;
const IN_FLIGHT: usize = 8;
const PAYLOAD: usize = 16 << 10;
/// Request and response messages: an id, then a checksum or a descriptor.
const MSG: usize = 64;
/// The id that says "this client is done".
const BYE: u64 = u64::MAX;
const WAIT: Duration = Duration::from_secs(30);

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn main() -> Res {
    // Spans and events on stderr as RUST_LOG filters them (unset: errors).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let node = Node::from_env_or_launch(RANKS)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let node = AsyncNode::new(node)?;
        let everyone: Vec<usize> = (0..node.world_size()).collect();
        node.barrier(&everyone, WAIT).await?;
        let start = Instant::now();
        let report = if node.rank() == 0 {
            serve(&node).await?
        } else {
            client(&node).await?
        };
        node.barrier(&everyone, WAIT).await?;
        println!(
            "async_service rank {} on {}: {report} in {:?}",
            node.rank(),
            node.describe(),
            start.elapsed()
        );
        Ok(())
    })
}

fn buffer(node: &AsyncNode, len: usize) -> Res<RegisteredBuffer> {
    Ok(node.registry().alloc(len, RegisterOptions::local())?)
}

/// The server: for each client, a loop that keeps receives posted and
/// hands each request to a task of its own.
async fn serve(node: &AsyncNode) -> Res<String> {
    let clients = node.world_size() - 1;
    let mut loops = tokio::task::JoinSet::new();
    for client in 1..=clients {
        let node = node.clone();
        loops.spawn(async move { serve_client(node, client).await });
    }
    let mut served = 0;
    while let Some(n) = loops.join_next().await {
        served += n??;
    }
    Ok(format!("served {served} requests from {clients} clients"))
}

async fn serve_client(node: AsyncNode, client: usize) -> Res<u64> {
    let mut receives = std::collections::VecDeque::new();
    for _ in 0..IN_FLIGHT {
        receives.push_back(node.receive(client, buffer(&node, MSG)?));
    }
    let mut handlers = tokio::task::JoinSet::new();
    let mut served = 0;
    while let Some(next) = receives.pop_front() {
        let request = next.await?;
        let id = u64::from_le_bytes(request.received()[..8].try_into()?);
        if id == BYE {
            break;
        }
        let len = usize::from(request.received()[8]);
        let payload = RemoteMemoryRegion::decode(&request.received()[9..9 + len])?;
        // The request's buffer takes the next request.
        receives.push_back(node.receive(client, request.into_buf()));
        let node = node.clone();
        handlers.spawn(async move {
            let read = node.read(client, buffer(&node, payload.len() as usize)?, payload);
            let sum = checksum(read.await?.bytes());
            let mut answer = buffer(&node, MSG)?;
            answer[..8].copy_from_slice(&id.to_le_bytes());
            answer[8..16].copy_from_slice(&sum.to_le_bytes());
            node.send_range(client, answer, 0..16).await?;
            Res::Ok(())
        });
        served += 1;
    }
    while let Some(done) = handlers.join_next().await {
        done??;
    }
    Ok(served)
}

/// Responses by request id: the client's receives complete in the
/// server's order, its workers wait for their own.
type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<u64>>>>;

/// A client: `IN_FLIGHT` workers, each with its own payload buffer
/// exposed for the server to read, and one task taking the responses.
async fn client(node: &AsyncNode) -> Res<String> {
    let me = node.rank() as u64;
    let waiting: Waiting = Arc::default();
    let responses = {
        let (node, waiting) = (node.clone(), waiting.clone());
        tokio::spawn(async move {
            let mut receives = std::collections::VecDeque::new();
            for _ in 0..IN_FLIGHT {
                receives.push_back(node.receive(0, buffer(&node, MSG)?));
            }
            for _ in 0..REQUESTS {
                let Some(next) = receives.pop_front() else {
                    break;
                };
                let got = next.await?;
                let id = u64::from_le_bytes(got.received()[..8].try_into()?);
                let sum = u64::from_le_bytes(got.received()[8..16].try_into()?);
                if let Some(worker) = waiting.lock().map_err(|_| "poisoned")?.remove(&id) {
                    let _ = worker.send(sum);
                }
                receives.push_back(node.receive(0, got.into_buf()));
            }
            Res::Ok(())
        })
    };
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..IN_FLIGHT as u64 {
        let (node, waiting) = (node.clone(), waiting.clone());
        workers.spawn(async move {
            let opts = RegisterOptions::local().allow_remote_read();
            let mut payload = node.registry().alloc(PAYLOAD, opts)?;
            let remote = payload.registration().remote()?;
            let mut request = buffer(&node, MSG)?;
            for id in (w..REQUESTS).step_by(IN_FLIGHT) {
                // The server reads this while the request is out: write it
                // first, then ask.
                for (i, b) in payload.iter_mut().enumerate() {
                    *b = (i as u64 ^ id ^ me) as u8;
                }
                let expect = checksum(&payload);
                let (tx, rx) = oneshot::channel();
                waiting.lock().map_err(|_| "poisoned")?.insert(id, tx);
                let wire = remote.encode();
                request[..8].copy_from_slice(&id.to_le_bytes());
                request[8] = wire.len() as u8;
                request[9..9 + wire.len()].copy_from_slice(&wire);
                request = node.send(0, request).await?.into_buf();
                let sum = tokio::time::timeout(WAIT, rx).await??;
                if sum != expect {
                    return Err(
                        format!("request {id}: checksum {sum:#x}, expected {expect:#x}").into(),
                    );
                }
            }
            Res::Ok(())
        });
    }
    while let Some(done) = workers.join_next().await {
        done??;
    }
    responses.await??;
    let mut bye = buffer(node, MSG)?;
    bye[..8].copy_from_slice(&BYE.to_le_bytes());
    node.send_range(0, bye, 0..8).await?;
    Ok(format!(
        "{REQUESTS} requests answered and checked, {IN_FLIGHT} in flight"
    ))
}
