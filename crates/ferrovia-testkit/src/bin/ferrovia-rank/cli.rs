//! The command line and the environment `ferrovia-rank` reads: every bad
//! value is an error naming the argument or variable, never a silent
//! default.

use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use ferrovia_node::{BarrierAlgorithm, BootstrapError};

/// One rank of a ferrovia job: rank, world size and rendezvous come from
/// the launcher's environment (FERROVIA_*, torchrun, Slurm, mpirun).
#[derive(Debug, Parser)]
#[command(
    name = "ferrovia-rank",
    after_help = "Exit status: 0 done, 1 bad usage, 2 bootstrap failed, 3 a barrier or transfer failed.\n\
Environment: FERROVIA_BOOTSTRAP_TIMEOUT_MS bounds the rendezvous (default 60000); \
FERROVIA_BARRIER=dissemination|centralized|tree picks the barrier; RUST_LOG=warn|info|debug logs to stderr."
)]
pub(crate) struct Cli {
    /// With no launcher in the environment, start N ranks of this command
    /// on this machine (Node::from_env_or_launch).
    #[arg(long, value_name = "N")]
    pub(crate) launch: Option<usize>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// What the rank does once connected.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// A narrated tour: barrier, ring send, RDMA writes and reads.
    Demo,
    /// Every operation with every rank, verified.
    Exchange {
        /// Iterations.
        #[arg(default_value_t = 10)]
        iters: usize,
    },
    /// Barriers of every rank in a loop.
    BarrierLoop {
        /// Barriers.
        #[arg(default_value_t = 1_000_000)]
        iters: usize,
        /// Timeout of each, in milliseconds.
        #[arg(default_value_t = 3000)]
        timeout_ms: u64,
    },
    /// Barrier latency: rank 0 prints the median and p99.
    BarrierBench {
        /// The algorithm.
        algo: Algorithm,
        /// Timed barriers.
        #[arg(default_value_t = 200)]
        iters: usize,
    },
    /// A write with a deregistered key is refused (3 ranks or more).
    StaleWrite,
    /// Three ranks: issue 12's stale barrier signal.
    BarrierAfterFailure {
        /// Timeout of the failing barrier, in milliseconds.
        #[arg(default_value_t = 3000)]
        timeout_ms: u64,
    },
    /// Three ranks: rank 2 breaks its connection to rank 0 and fails
    /// `[0, 1, 2]` at once; ranks 0 and 1 print how long they waited there.
    BarrierAbandon {
        /// Timeout of `[0, 1, 2]`, in milliseconds.
        #[arg(default_value_t = 10_000)]
        timeout_ms: u64,
    },
    /// Remote atomics on rank 0's memory: an exact counter, a ticket lock
    /// that loses no update, typed errors (issue 14).
    Atomics {
        /// Fetch-and-adds per rank.
        #[arg(default_value_t = 10_000)]
        adds: u64,
        /// Turns of the lock per rank.
        #[arg(default_value_t = 50)]
        rounds: u64,
    },
    /// All-to-all through each rank's shared receive pool (issue 14).
    PoolExchange {
        /// Messages to every other rank.
        #[arg(default_value_t = 32)]
        msgs: u64,
        /// Pooled receives per rank.
        #[arg(long, default_value_t = 64)]
        depth: u32,
    },
    /// Ranks 1.. flood rank 0's small, slowly refilled pool; nothing is lost.
    PoolFlood {
        /// Messages from every sender.
        #[arg(default_value_t = 300)]
        msgs: u64,
        /// Pooled receives at rank 0.
        #[arg(long, default_value_t = 8)]
        depth: u32,
    },
    /// Three ranks: a message longer than a pooled receive is an error
    /// naming its sender; the next sender's still arrives.
    PoolTooLong,
    /// Ranks 0 and 1 lose their connection to a drain deadline, reconnect
    /// and exchange data; then barriers with every rank (issue 13 part 3).
    Reconnect {
        /// Rank 1 leaves instead: rank 0's reconnect must fail naming it.
        #[arg(long)]
        dead: bool,
        /// The reconnect's timeout, in milliseconds.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
        /// Rank 1 sends a message on the flushed connection before the
        /// reconnect: it must never reach rank 0's receives afterwards.
        #[arg(long)]
        stale: bool,
        /// Flush-and-reconnect cycles.
        #[arg(long, default_value_t = 1)]
        cycles: usize,
    },
    /// Two rails from every rank to every rank, sends and writes checked on
    /// each; rail 1 between ranks 0 and 1 flushed and reconnected while
    /// the rest keeps working (3 ranks or more).
    Rails {
        /// This rank names a device that does not exist: every rank's
        /// open_rail must fail at once, naming it.
        #[arg(long)]
        fail_rank: Option<usize>,
        /// Each open_rail's and reconnect's timeout, in milliseconds.
        #[arg(long, default_value_t = 30_000)]
        timeout_ms: u64,
    },
    /// Prints how long this rank's bootstrap took (the node's build, the
    /// engine's meeting included) and when it was connected, then leaves
    /// after a barrier of every rank (`cargo xtask bench bootstrap`).
    Bootstrap,
    /// A member of a store-backed job (FERROVIA_STORE): round 0; the victim
    /// is killed, the survivors see it leave and admit its replacement;
    /// round 1 with every rank.
    Member {
        /// The rank the test kills.
        #[arg(long)]
        victim: Option<usize>,
        /// This process replaces a dead member.
        #[arg(long)]
        replacement: bool,
        /// Each wait for an event, in milliseconds.
        #[arg(long, default_value_t = 30_000)]
        timeout_ms: u64,
    },
    /// Two members of a store-backed job; the test kills the store and
    /// restarts it.
    StoreLost {
        /// Each wait for an event, in milliseconds.
        #[arg(long, default_value_t = 30_000)]
        timeout_ms: u64,
    },
    /// Three ranks: rank 2 leaves; rank 0's work with it fails naming it,
    /// and waits on it end at once (issue 13 part 2).
    DeadPeer {
        /// Leave out the sends to the dead rank (UCX 1.13's shared memory
        /// never completes them, not even flushed).
        #[arg(long)]
        no_sends: bool,
    },
}

/// A barrier algorithm, as `barrier-bench` and `FERROVIA_BARRIER` name it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Algorithm {
    /// Dissemination (the default).
    Dissemination,
    /// Everyone signals rank 0, which signals back.
    Centralized,
    /// A binary tree.
    Tree,
}

impl From<Algorithm> for BarrierAlgorithm {
    fn from(a: Algorithm) -> BarrierAlgorithm {
        match a {
            Algorithm::Dissemination => BarrierAlgorithm::Dissemination,
            Algorithm::Centralized => BarrierAlgorithm::Centralized,
            Algorithm::Tree => BarrierAlgorithm::BinaryTree,
        }
    }
}

fn malformed(name: &str, value: &str, reason: String) -> BootstrapError {
    BootstrapError::MalformedVar {
        name: name.into(),
        value: value.into(),
        reason,
    }
}

/// `FERROVIA_BARRIER`, if set.
pub(crate) fn barrier_var() -> Result<Option<Algorithm>, BootstrapError> {
    match std::env::var("FERROVIA_BARRIER") {
        Ok(v) if !v.is_empty() => Algorithm::from_str(&v, true).map(Some).map_err(|_| {
            malformed(
                "FERROVIA_BARRIER",
                &v,
                "expected dissemination, centralized or tree".into(),
            )
        }),
        _ => Ok(None),
    }
}

/// `FERROVIA_BOOTSTRAP_TIMEOUT_MS`, if set.
pub(crate) fn bootstrap_timeout_var() -> Result<Option<Duration>, BootstrapError> {
    match std::env::var("FERROVIA_BOOTSTRAP_TIMEOUT_MS") {
        Ok(v) if !v.is_empty() => v
            .trim()
            .parse()
            .map(|ms| Some(Duration::from_millis(ms)))
            .map_err(|e: std::num::ParseIntError| {
                malformed("FERROVIA_BOOTSTRAP_TIMEOUT_MS", &v, e.to_string())
            }),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("ferrovia-rank").chain(line.split_whitespace()))
    }

    #[test]
    fn commands_and_numbers_parse() {
        let c = parse("--launch 4 exchange 2").unwrap();
        assert_eq!(c.launch, Some(4));
        assert!(matches!(c.command, Command::Exchange { iters: 2 }));
        assert!(matches!(
            parse("barrier-bench tree").unwrap().command,
            Command::BarrierBench {
                algo: Algorithm::Tree,
                iters: 200
            }
        ));
    }

    #[test]
    fn a_bad_number_or_name_is_an_error_naming_it() {
        for (line, named) in [
            ("exchange many", "ITERS"),
            ("barrier-loop 10 soon", "TIMEOUT_MS"),
            ("barrier-bench ring", "ALGO"),
            ("--launch x demo", "--launch"),
            ("teleport", "teleport"),
        ] {
            let e = parse(line).unwrap_err().to_string();
            assert!(e.contains(named), "{line}: {e}");
        }
        assert_eq!(
            parse("--help").unwrap_err().kind(),
            clap::error::ErrorKind::DisplayHelp
        );
    }
}
