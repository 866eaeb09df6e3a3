//! `ferrovia-soak`: a job that runs for a while under faults, every
//! message checked (reliability issue 22, part 6).
//!
//! ```text
//! ferrovia-soak drive --ranks N --seconds S [--garbage-ms MS] [--spare-ucx-ports]
//! ferrovia-soak rank --seconds S --seed X        (one rank; the driver starts them)
//! ```
//!
//! The driver starts `N` ranks on this host (over whatever backend the
//! environment picks: `FERROVIA_BACKEND`, `UCX_TLS`), samples each rank's
//! threads, open files and resident memory every second, and sends
//! garbage (17 zero bytes, UCX's tcp magic number with 4 KiB of 0xff,
//! random bytes, huge length prefixes, a slowloris) to the TCP ports the
//! ranks listen on: their control ports, rank 0's `Listener`, and UCX's
//! own loopback ports unless `--spare-ucx-ports` (with tcp in `UCX_TLS`
//! those abort on such bytes, which only local users can send). Rank 0
//! draws every round and tells the others in a checked message: an
//! all-to-all of sends and writes, a flush and reconnect of a random pair
//! (the flushed side's peer sends on the old connection), barriers on a
//! random subset, a client connecting to rank 0's `Listener` by address,
//! and async operations whose futures are dropped at random. At the end
//! the driver prints messages lost, wrong, hangs, and each rank's
//! resources (their floors over the first minute and the last); it exits non-zero if
//! anything was lost, wrong or hung, or a resource grew.
#![forbid(unsafe_code)]

mod drive;
mod garbage;
mod procfs;
mod rank;
mod rounds;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A soak with faults; see the crate docs.
#[derive(Parser, Debug)]
#[command(
    name = "ferrovia-soak",
    about = "A ferrovia job under faults, every message checked"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start the ranks, watch them, send them garbage, report.
    Drive {
        /// Ranks to start on this host.
        #[arg(long, default_value_t = 8)]
        ranks: usize,
        /// How long the job runs.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Garbage to a listening port every this many milliseconds (0:
        /// none).
        #[arg(long, default_value_t = 250)]
        garbage_ms: u64,
        /// Send garbage only to ferrovia's own ports (the control ports
        /// and the listener), not to UCX's (needed with tcp in UCX_TLS).
        #[arg(long)]
        spare_ucx_ports: bool,
        /// The seed of rank 0's draws.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// One rank (started by `drive`, with FERROVIA_* set).
    Rank {
        /// Stop drawing rounds after this long.
        #[arg(long)]
        seconds: u64,
        /// The seed of rank 0's draws.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Drive {
            ranks,
            seconds,
            garbage_ms,
            spare_ucx_ports,
            seed,
        } => drive::run(drive::Plan {
            ranks,
            seconds,
            garbage_ms,
            spare_ucx_ports,
            seed,
        }),
        Command::Rank { seconds, seed } => match rank::run(seconds, seed) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ferrovia-soak rank: {e}");
                ExitCode::from(3)
            }
        },
    }
}
