//! Running rank programs as one job under Debian's `mpirun` (Open MPI
//! 4.1 with PMIx 4), so a node bootstraps through PMIx: every rank's
//! output captured on its own (`--output-filename`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::child::finish;

/// What one rank of an `mpirun` job printed: (stdout, stderr).
pub type RankOutput = (String, String);

/// Runs `program args` as `n` ranks under `mpirun` (as root too:
/// `--allow-run-as-root`; more ranks than cores: `--oversubscribe`), with
/// `env` exported to every rank; kills the job past `limit`. Returns
/// mpirun's exit code (0 only if every rank exited 0; `None` when killed)
/// and each rank's output, in rank order.
pub fn mpirun(
    program: &Path,
    n: usize,
    args: &[&str],
    env: &[(&str, &str)],
    limit: Duration,
) -> (Option<i32>, Vec<RankOutput>) {
    static JOBS: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ferrovia-mpirun-{}-{}",
        std::process::id(),
        JOBS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    // A session directory of its own: concurrent mpiruns sharing
    // /tmp/ompi.HOST.UID race to create it ("File exists", orte_init
    // fails).
    let session = dir.with_extension("session");
    let _ = std::fs::create_dir_all(&session);
    let mut c = Command::new("mpirun");
    c.args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(n.to_string())
        .args(["--mca", "orte_tmpdir_base"])
        .arg(&session)
        .arg("--output-filename")
        .arg(&dir);
    for (k, v) in env {
        c.arg("-x").arg(format!("{k}={v}"));
    }
    c.arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c
        .spawn()
        .unwrap_or_else(|e| panic!("mpirun (apt-get install openmpi-bin): {e}"));
    let (code, out, err) = finish(child, limit);
    let ranks = (0..n)
        .map(|r| {
            let read = |f: &str| {
                std::fs::read_to_string(dir.join(format!("1/rank.{r}/{f}"))).unwrap_or_default()
            };
            (read("stdout"), read("stderr"))
        })
        .collect();
    if code != Some(0) {
        eprintln!("mpirun exited {code:?}:\n{out}\n{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&session);
    (code, ranks)
}
