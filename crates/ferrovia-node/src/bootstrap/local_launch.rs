//! Being one's own launcher: a program started without any launcher (a
//! plain `cargo run --example NAME`) starts copies of itself as the ranks
//! of a job on this machine, so examples and quick experiments need no
//! torchrun, srun or mpirun.
//!
//! The job gets a random token, and rank 0 is started first on port 0: it
//! reports the port the OS gave it, and only then do the other ranks start
//! with that port. A port picked in advance could be taken (by UCX's own
//! sockets, say) before rank 0 binds it.

use std::path::Path;
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

use crate::bootstrap::token;
use crate::error::{BootstrapError, NodeError};

/// How long rank 0 may take to report its port.
const PORT_WAIT: Duration = Duration::from_secs(60);

/// Starts `ranks` copies of this executable (same arguments) as one job
/// on 127.0.0.1, waits for all, and exits with the first failure's status
/// (0 when every rank succeeded). Never returns on success.
pub(crate) fn launch_here(ranks: usize) -> Result<std::convert::Infallible, NodeError> {
    if ranks == 0 {
        return Err(BootstrapError::NoRanks { ranks }.into());
    }
    let exe = std::env::current_exe().map_err(|e| launch("find this program", e))?;
    let token = token::random()?;
    let port_file = std::env::temp_dir().join(format!(
        "ferrovia-{}-{}.port",
        std::process::id(),
        &token[..8]
    ));
    let rank = |r: usize, rendezvous: &str| {
        let mut c = Command::new(&exe);
        c.args(std::env::args_os().skip(1))
            .env("FERROVIA_RANK", r.to_string())
            .env("FERROVIA_WORLD_SIZE", ranks.to_string())
            .env("FERROVIA_RENDEZVOUS", rendezvous)
            .env("FERROVIA_JOB_TOKEN", &token)
            .env_remove("FERROVIA_HOSTFILE");
        c
    };
    let mut root = rank(0, "127.0.0.1:0")
        .env("FERROVIA_RENDEZVOUS_PORT_FILE", &port_file)
        .spawn()
        .map_err(|e| launch("start rank 0", e))?;
    let port = match wait_for_port(&port_file, &mut root) {
        Ok(p) => p,
        Err(e) => {
            let _ = root.kill();
            let _ = root.wait();
            return Err(e.into());
        }
    };
    let _ = std::fs::remove_file(&port_file);
    eprintln!(
        "ferrovia: no launcher configured; starting {ranks} ranks of this program on this machine, meeting at 127.0.0.1:{port}"
    );
    let mut children: Vec<Child> = vec![root];
    for r in 1..ranks {
        match rank(r, &format!("127.0.0.1:{port}")).spawn() {
            Ok(c) => children.push(c),
            Err(e) => {
                for mut c in children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(launch(&format!("start rank {r}"), e));
            }
        }
    }
    let mut code = 0;
    for (r, mut c) in children.into_iter().enumerate() {
        let status = c
            .wait()
            .map_err(|e| launch(&format!("wait for rank {r}"), e))?;
        if !status.success() && code == 0 {
            eprintln!("ferrovia: rank {r} failed ({status})");
            code = status.code().unwrap_or(1);
        }
    }
    std::process::exit(code)
}

fn launch(what: &str, source: std::io::Error) -> NodeError {
    BootstrapError::Launch {
        what: what.to_owned(),
        source,
    }
    .into()
}

/// The port rank 0 reported in `path`, while it runs.
fn wait_for_port(path: &Path, root: &mut Child) -> Result<u16, BootstrapError> {
    let start = Instant::now();
    loop {
        if let Some(port) = read_port(path) {
            return Ok(port);
        }
        if let Ok(Some(status)) = root.try_wait() {
            return Err(BootstrapError::Protocol(format!(
                "rank 0 exited ({status}) before it listened"
            )));
        }
        if start.elapsed() > PORT_WAIT {
            return Err(BootstrapError::TimedOut {
                what: format!("rank 0 to report its port in {}", path.display()),
                after: start.elapsed(),
            });
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// A port file's port, once it is there (it is renamed into place whole).
fn read_port(path: &Path) -> Option<u16> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}
