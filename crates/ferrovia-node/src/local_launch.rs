//! Being one's own launcher: a program started without any launcher (a
//! plain `cargo run --example NAME`) starts copies of itself as the ranks
//! of a job on this machine, so examples and quick experiments need no
//! torchrun, srun or mpirun.

use std::net::TcpListener;
use std::process::{Child, Command};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{BootstrapError, NodeError};

/// Starts `ranks` copies of this executable (same arguments) as one job
/// on 127.0.0.1, waits for all, and exits with the first failure's status
/// (0 when every rank succeeded). Never returns on success.
pub(crate) fn launch_here(ranks: usize) -> Result<std::convert::Infallible, NodeError> {
    let exe = std::env::current_exe().map_err(|e| {
        BootstrapError::Protocol(format!("cannot find this program to start its ranks: {e}"))
    })?;
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| BootstrapError::Protocol(format!("no free local port: {e}")))?
        .port();
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let token = format!("local-{}-{nonce:x}", std::process::id());
    eprintln!(
        "ferrovia: no launcher configured; starting {ranks} ranks of this program on this machine"
    );
    let mut children: Vec<Child> = Vec::with_capacity(ranks);
    for r in 0..ranks {
        let child = Command::new(&exe)
            .args(std::env::args_os().skip(1))
            .env("FERROVIA_RANK", r.to_string())
            .env("FERROVIA_WORLD_SIZE", ranks.to_string())
            .env("FERROVIA_RENDEZVOUS", format!("127.0.0.1:{port}"))
            .env("FERROVIA_JOB_TOKEN", &token)
            .spawn();
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                for mut c in children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(BootstrapError::Protocol(format!("cannot start rank {r}: {e}")).into());
            }
        }
    }
    let mut code = 0;
    for (r, mut c) in children.into_iter().enumerate() {
        let status = c
            .wait()
            .map_err(|e| BootstrapError::Protocol(format!("cannot wait for rank {r}: {e}")))?;
        if !status.success() && code == 0 {
            eprintln!("ferrovia: rank {r} failed ({status})");
            code = status.code().unwrap_or(1);
        }
    }
    std::process::exit(code)
}
