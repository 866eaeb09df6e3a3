//! One rank of ferrovia-async's multi-process tests (`tests/async_suite`
//! starts the ranks with `FERROVIA_*` set, over verbs or UCX):
//!
//! ```text
//! ferrovia-async-rank stress OPS     # OPS operations in flight at once, checked
//! ferrovia-async-rank canary ROUNDS  # dropped and forgotten reads and receives vs canaries
//! ferrovia-async-rank killed         # rank 2 is killed; the others' futures name it
//! ferrovia-async-rank atomics K      # K fetch-adds per rank in flight, compare-and-swap tickets
//! ```
//!
//! Each prints one line starting with the scenario's name and `ok` when
//! everything checked out, and exits non-zero otherwise.

mod atomics;
mod canary;
mod killed;
mod stress;

use std::process::ExitCode;
use std::time::Duration;

use ferrovia_async::{Async, AsyncConfig, AsyncNode, Wake};
use ferrovia_node::Node;

/// How long any one step may take.
pub(crate) const WAIT: Duration = Duration::from_secs(60);

pub(crate) type Error = Box<dyn std::error::Error>;

/// One more barrier before the process ends, its outcome ignored: a rank
/// that left its last checked barrier at once could exit while a peer's
/// signal write to it is still completing, failing that peer's barrier.
/// Every rank entered this one only after passing the last checked one.
async fn farewell(node: &AsyncNode) {
    let _ = node.barrier(&everyone(node), Duration::from_secs(5)).await;
}

/// Every rank, as a barrier list.
pub(crate) fn everyone(node: &AsyncNode) -> Vec<usize> {
    (0..node.world_size()).collect()
}

pub(crate) fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect()
}

fn main() -> ExitCode {
    ferrovia_testkit::init_logs();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = |i: usize, default: usize| -> usize {
        args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ferrovia-async-rank: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let scenario = args.first().map(String::as_str).unwrap_or("");
    let result: Result<(), Error> = runtime.block_on(async {
        let mut node = Node::from_env()?;
        let node = match scenario {
            "stress" => {
                let plan = stress::Plan::new(&mut node, n(1, 10_000))?;
                // Sleeping at once, so the run proves kernel wake-ups.
                let node =
                    Async::with_config(node, AsyncConfig::default().wake(Wake::SLEEP_AT_ONCE))?;
                stress::run(node.clone(), plan).await?;
                node
            }
            "canary" => {
                let remotes = canary::expose(&mut node)?;
                let node = Async::new(node)?;
                canary::run(node.clone(), remotes, n(1, 200)).await?;
                node
            }
            "killed" => return killed::run(Async::new(node)?).await,
            "atomics" => {
                let (words, remotes) = atomics::expose(&mut node)?;
                let node = Async::new(node)?;
                atomics::run(node.clone(), words, remotes, n(1, 500)).await?;
                node
            }
            other => {
                return Err(format!(
                    "unknown scenario {other:?}: stress, canary, killed or atomics"
                )
                .into());
            }
        };
        farewell(&node).await;
        Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrovia-async-rank {scenario}: {e}");
            ExitCode::FAILURE
        }
    }
}
