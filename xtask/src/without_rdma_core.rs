//! The UCX fallback needs no rdma-core. Two checks, as the test run's
//! "without rdma-core" step:
//!
//! 1. `cargo test -p ferrovia --no-default-features --features ucx` in a
//!    target dir of its own, with rdma-core's pkg-config files left out of
//!    pkg-config's path and, where this runs as root, its headers hidden
//!    by empty bind mounts in a private mount namespace (as on a machine
//!    without libibverbs-dev). Its tests count as host tests.
//! 2. Two ranks of the default build's `ferrovia-rank exchange` with
//!    `libibverbs.so.1` hidden from the loader (a bind mount of
//!    `/dev/null` over it): they must start, pick UCX, log why, and
//!    finish. One test.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cmd;
use crate::failure::{Failure, Result, io_failure};
use crate::libtest::{self, Tally};
use crate::workspace;

/// The step's title in the test run.
pub(crate) const TITLE: &str =
    "without rdma-core: UCX-only tests, and a default build with libibverbs hidden";

/// Header directories rdma-core's `-dev` packages install.
const RDMA_HEADERS: &[&str] = &["/usr/include/infiniband", "/usr/include/rdma"];

/// Whether mount namespaces are ours to make (root, with `unshare`).
fn can_hide() -> bool {
    cmd::is_root()
        && Command::new("unshare")
            .args(["--mount", "true"])
            .status()
            .is_ok_and(|s| s.success())
}

/// `sh -c SCRIPT` in a private mount namespace where each `(what, over)`
/// bind mount is made first.
fn hidden(mounts: &[(PathBuf, PathBuf)], script: &str) -> Command {
    let mut line = String::new();
    for (what, over) in mounts {
        line.push_str(&format!(
            "mount --bind '{}' '{}' && ",
            what.display(),
            over.display()
        ));
    }
    line.push_str(script);
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c", &line]);
    c
}

/// A pkg-config directory with every `.pc` file of the system's search
/// path except rdma-core's (any that names ibverbs or rdmacm).
fn pkg_config_without_rdma_core(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io_failure(format!("create {}", dir.display()), e))?;
    let search =
        cmd::output(Command::new("pkg-config").args(["--variable", "pc_path", "pkg-config"]))
            .unwrap_or_default();
    for from in search.trim().split(':').filter(|d| !d.is_empty()) {
        let Ok(entries) = std::fs::read_dir(from) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "pc") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.contains("ibverbs") || text.contains("rdmacm") {
                continue;
            }
            let to = dir.join(e.file_name());
            std::fs::copy(&path, &to)
                .map_err(|err| io_failure(format!("copy {}", path.display()), err))?;
        }
    }
    Ok(())
}

/// The UCX-only build and its tests; the counts of its test binaries.
fn ucx_only_tests(hide: bool) -> Result<Tally> {
    let scratch = workspace::root()
        .join("target")
        .join("xtask")
        .join("no-rdma-core");
    let pc = scratch.join("pkgconfig");
    pkg_config_without_rdma_core(&pc)?;
    let cargo = cmd::cargo_path();
    let test = format!(
        "exec '{}' test -p ferrovia --no-default-features --features ucx",
        cargo.display()
    );
    let mut c = if hide {
        let empty = scratch.join("empty");
        std::fs::create_dir_all(&empty)
            .map_err(|e| io_failure(format!("create {}", empty.display()), e))?;
        let mounts: Vec<(PathBuf, PathBuf)> = RDMA_HEADERS
            .iter()
            .map(PathBuf::from)
            .filter(|d| d.is_dir())
            .map(|d| (empty.clone(), d))
            .collect();
        hidden(&mounts, &test)
    } else {
        say!(
            "xtask test: not root: rdma-core's headers stay visible; only its pkg-config files are left out"
        );
        let mut c = Command::new("sh");
        c.args(["-c", &test]);
        c
    };
    c.env("CARGO_TARGET_DIR", scratch.join("target"))
        .env("PKG_CONFIG_LIBDIR", &pc)
        .env_remove("PKG_CONFIG_PATH");
    let counted = libtest::run_counting(&mut c)?;
    if !counted.status.success() || counted.summaries == 0 {
        return Err(Failure::new(format!(
            "the UCX-only build or its tests failed ({}); `{}`",
            counted.status,
            cmd::describe(&c)
        )));
    }
    Ok(counted.tally)
}

/// Where the loader finds libibverbs, resolved to the real file.
fn libibverbs_file() -> Option<PathBuf> {
    let listing = cmd::output(Command::new("ldconfig").arg("-p")).ok()?;
    let line = listing
        .lines()
        .find(|l| l.trim_start().starts_with("libibverbs.so.1 "))?;
    let path = line.rsplit("=> ").next()?.trim();
    std::fs::canonicalize(path).ok()
}

/// Two ranks of the default build's `ferrovia-rank` with libibverbs
/// hidden: both finish over UCX and say why.
fn default_build_without_libibverbs(rank_program: &Path) -> Result<()> {
    let lib = libibverbs_file()
        .ok_or_else(|| Failure::new("libibverbs.so.1 is not installed here: nothing to hide"))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| io_failure("pick a port", e))?;
    let program = rank_program.display();
    let script = format!(
        "export FERROVIA_WORLD_SIZE=2 FERROVIA_RENDEZVOUS=127.0.0.1:{port} \
         FERROVIA_JOB_TOKEN=without-libibverbs RUST_LOG=info UCX_TLS=tcp; \
         FERROVIA_RANK=1 '{program}' exchange 1 & \
         FERROVIA_RANK=0 '{program}' exchange 1; a=$?; wait $!; b=$?; \
         [ $a -eq 0 ] && [ $b -eq 0 ]"
    );
    let mut c = hidden(&[(PathBuf::from("/dev/null"), lib.clone())], &script);
    let out = c
        .output()
        .map_err(|e| Failure::new(format!("cannot run `{}`: {e}", cmd::describe(&c))))?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let said_why = stderr.contains("using UCX") && stderr.contains("libibverbs");
    if !out.status.success() || !stdout.contains("verified") || !said_why {
        return Err(Failure::new(format!(
            "with {} hidden, ferrovia-rank did not run over UCX and say why ({}):\n{stdout}{stderr}",
            lib.display(),
            out.status
        )));
    }
    say!(
        "xtask test: with {} hidden, both ranks ran over UCX and logged: {}",
        lib.display(),
        stderr
            .lines()
            .find(|l| l.contains("using UCX"))
            .unwrap_or_default()
    );
    Ok(())
}

/// Runs both checks; the UCX-only build's test counts plus one for the
/// hidden-library run.
pub(crate) fn run(rank_program: Option<&Path>) -> (Tally, Result<()>) {
    let hide = can_hide();
    let mut tally = match ucx_only_tests(hide) {
        Ok(t) => t,
        Err(e) => return (Tally::default(), Err(e)),
    };
    if !hide {
        say!("xtask test: not root: the hidden-library run needs a mount namespace; skipped");
        return (tally, Ok(()));
    }
    let Some(program) = rank_program else {
        tally.failed += 1;
        return (
            tally,
            Err(Failure::new(
                "ferrovia-rank was not built: cannot run it without libibverbs",
            )),
        );
    };
    match default_build_without_libibverbs(program) {
        Ok(()) => tally.passed += 1,
        Err(e) => {
            tally.failed += 1;
            return (tally, Err(e));
        }
    }
    (tally, Ok(()))
}
