//! A node's statistics as Prometheus metrics (feature `metrics`): each
//! rank installs `metrics-exporter-prometheus`'s recorder with its HTTP
//! listener on 127.0.0.1 (port `FERROVIA_METRICS_PORT` + rank; 9464 +
//! rank by default), sends messages to the next rank, publishes what its
//! node counted (`Node::publish_metrics`) and serves it until the
//! standard input gives a line or closes (10 minutes at most):
//!
//! ```sh
//! cargo run -p ferrovia --features metrics --example prometheus
//! curl -s http://127.0.0.1:9464/metrics | grep ferrovia_bytes_total
//! ```

use std::error::Error;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;

use ferrovia::prelude::*;
use ferrovia::{
    Gather, Node, NodeError, PeerReceiveWorkRequest, PeerSendWorkRequest, ReceiveWorkRequest,
    RegisterOptions, Scatter, SendWorkRequest,
};
use metrics_exporter_prometheus::PrometheusBuilder;

/// Messages each rank sends to the next, and their size.
const MESSAGES: usize = 10;
const SIZE: usize = 4096;
const WAIT: Duration = Duration::from_secs(30);
/// How long rank 0 serves at most.
const SERVE: Duration = Duration::from_secs(600);

fn main() -> Result<(), Box<dyn Error>> {
    // Spans and events on stderr as RUST_LOG filters them (unset: errors).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut node = Node::from_env_or_launch(2)?;
    let (me, n) = (node.rank(), node.world_size());
    let first: u16 = match std::env::var("FERROVIA_METRICS_PORT") {
        Ok(p) => p.parse()?,
        Err(_) => 9464,
    };
    // Loopback only: the numbers are for this machine's scraper.
    let addr = SocketAddr::from(([127, 0, 0, 1], first + me as u16));
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()?;

    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let msg = node
        .registry()
        .register_buffer(vec![me as u8; SIZE], RegisterOptions::local())?;
    let mut inbox = node
        .registry()
        .alloc(MESSAGES * SIZE, RegisterOptions::local())?;
    let everyone: Vec<usize> = (0..n).collect();
    node.scope(|s| {
        let (bytes, reg) = inbox.split_mut();
        let mut receives = Vec::new();
        for chunk in bytes.chunks_mut(SIZE) {
            receives.push(s.post_receive(PeerReceiveWorkRequest::new(
                prev,
                ReceiveWorkRequest::new(Scatter::new(reg, chunk)?),
            ))?);
        }
        s.barrier(&everyone, WAIT)?; // every receive is posted
        let g = [Gather::of(&msg)?];
        for _ in 0..MESSAGES {
            s.post_send(PeerSendWorkRequest::new(next, SendWorkRequest::new(&g)?))?
                .wait(WAIT)?;
        }
        for r in receives {
            r.wait(WAIT)?;
        }
        Ok::<_, NodeError>(())
    })?;
    node.publish_metrics();
    println!(
        "rank {me}: metrics on http://{addr}/metrics ({MESSAGES} sends of {SIZE} B to rank {next})"
    );
    std::io::stdout().flush()?;
    if me == 0 {
        // Serve until a line or the end of the standard input.
        let (done, wait) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = std::io::stdin().lock().read_line(&mut String::new());
            let _ = done.send(());
        });
        let _ = wait.recv_timeout(SERVE);
    }
    node.barrier(&everyone, SERVE + WAIT)?;
    Ok(())
}
