//! `init_logs`: the rank programs' log output, as a program using
//! ferrovia would set it up.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

/// Prints the libraries' `tracing` events, each with the spans it is in
/// (and any `log` records of other crates), to stderr as `RUST_LOG`
/// filters them, per target (`warn,ferrovia_node=debug`); silent when it
/// is unset. Does nothing if the program already installed a logger or
/// subscriber.
pub fn init_logs() {
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::OFF.into())
        .from_env_lossy();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
