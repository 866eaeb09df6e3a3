//! The Python environment that has the Mooncake Transfer Engine: a venv
//! outside the repository (under the user's cache, beside the VM's cache),
//! made with pip from PyPI the first time and reused after. Nothing of
//! Mooncake is committed; a machine that cannot reach PyPI (CI may not)
//! gets a reason to skip, not a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::failure::Result;
use crate::process::{Lines, Watched};
use crate::signals;

/// The wheel: the Transfer Engine without CUDA, with its C++
/// `transfer_engine_bench` and the Python binding te_bench.py uses.
pub(crate) const DIST: &str = "mooncake-transfer-engine-non-cuda";
/// Pinned: the binding's behaviour (the blocking batch status, the
/// queue limits over TCP) is what docs/mooncake.md describes.
pub(crate) const VERSION: &str = "0.3.13.post1";
/// Interpreters to build the venv from, in order: the wheel of this
/// version was measured with 3.11 (it requires 3.10 or newer).
const PYTHONS: [&str; 5] = [
    "python3.11",
    "python3.12",
    "python3.10",
    "python3.13",
    "python3",
];
/// `pip install` of the wheel (about 100 MB) and its few dependencies.
const INSTALL_LIMIT: Duration = Duration::from_secs(600);
/// Creating the venv, or importing the engine once.
const STEP_LIMIT: Duration = Duration::from_secs(120);
/// Written into the venv once the engine imports: a venv without it is a
/// half-made one (an interrupted pip) and is made again.
const MARKER: &str = "ferrovia-mooncake";
/// Set to `skip`: no venv, no Mooncake rows (a reason says so).
pub(crate) const SKIP_VAR: &str = "FERROVIA_MOONCAKE";
/// Where the venv goes instead of the cache.
pub(crate) const DIR_VAR: &str = "FERROVIA_MOONCAKE_VENV";

/// A ready venv.
#[derive(Debug, Clone)]
pub(crate) struct Venv {
    /// Its interpreter, which imports `mooncake.engine`.
    pub(crate) python: PathBuf,
}

/// `$FERROVIA_MOONCAKE_VENV`, else
/// `${XDG_CACHE_HOME:-$HOME/.cache}/ferrovia-mooncake/venv-VERSION`.
pub(crate) fn dir() -> std::result::Result<PathBuf, String> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var(DIR_VAR) {
        return Ok(PathBuf::from(dir));
    }
    let cache = var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .ok_or("neither XDG_CACHE_HOME nor HOME is set: no place for the Mooncake venv")?;
    Ok(cache
        .join("ferrovia-mooncake")
        .join(format!("venv-{VERSION}")))
}

/// The venv, made if missing. The inner `Err` is why Mooncake cannot run
/// here (no Python, no PyPI, an engine that does not load); the outer one
/// only comes from an interrupted xtask.
pub(crate) fn prepare() -> Result<std::result::Result<Venv, String>> {
    if std::env::var(SKIP_VAR).is_ok_and(|v| v == "skip") {
        return Ok(Err(format!("{SKIP_VAR}=skip")));
    }
    let dir = match dir() {
        Ok(dir) => dir,
        Err(reason) => return Ok(Err(reason)),
    };
    let venv = Venv {
        python: dir.join("bin").join("python"),
    };
    let want = format!("{DIST}=={VERSION}\n");
    if std::fs::read_to_string(dir.join(MARKER)).is_ok_and(|m| m == want)
        && step(Command::new(&venv.python).args(["-c", "import mooncake.engine"]))?.is_ok()
    {
        return Ok(Ok(venv));
    }
    if let Err(reason) = clear(&dir) {
        return Ok(Err(reason));
    }
    let Some(base) = PYTHONS.iter().find_map(|p| crate::cmd::find_in_path(p)) else {
        return Ok(Err(format!(
            "no Python 3.10 or newer on PATH (tried {})",
            PYTHONS.join(", ")
        )));
    };
    say!(
        "xtask bench: making the Mooncake venv in {} ({DIST}=={VERSION} from PyPI)",
        dir.display()
    );
    if let Err(reason) = step(Command::new(&base).arg("-m").arg("venv").arg(&dir))? {
        return Ok(Err(format!("{} -m venv failed: {reason}", base.display())));
    }
    // Few retries and a short timeout: without a network (CI may have
    // none) pip would otherwise retry for minutes before giving up.
    let mut pip = Command::new(&venv.python);
    pip.args(["-m", "pip", "install", "--disable-pip-version-check"])
        .args(["--no-input", "--retries", "1", "--timeout", "20", "--quiet"])
        .arg(want.trim());
    if let Err(reason) = run_limited(&mut pip, INSTALL_LIMIT)? {
        return Ok(Err(format!(
            "pip could not install {DIST}=={VERSION} (is PyPI reachable?): {reason}"
        )));
    }
    if let Err(reason) = step(Command::new(&venv.python).args(["-c", "import mooncake.engine"]))? {
        return Ok(Err(format!("mooncake.engine does not load: {reason}")));
    }
    if let Err(e) = std::fs::write(dir.join(MARKER), &want) {
        return Ok(Err(format!("cannot mark {} as made: {e}", dir.display())));
    }
    Ok(Ok(venv))
}

/// Removes a half-made venv at `dir`; refuses a directory that is no venv
/// (`$FERROVIA_MOONCAKE_VENV` may name anything).
fn clear(dir: &Path) -> std::result::Result<(), String> {
    let Ok(mut entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    let empty = entries.next().is_none();
    if !empty && !dir.join("pyvenv.cfg").is_file() {
        return Err(format!(
            "{} exists and is not a venv: not touching it",
            dir.display()
        ));
    }
    std::fs::remove_dir_all(dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))
}

/// [`run_limited`] with [`STEP_LIMIT`].
fn step(command: &mut Command) -> Result<std::result::Result<(), String>> {
    run_limited(command, STEP_LIMIT)
}

/// Runs `command` to its end within `limit`; `Err(reason)` if it fails:
/// its last line of stderr (else stdout), or the timeout.
fn run_limited(command: &mut Command, limit: Duration) -> Result<std::result::Result<(), String>> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match Watched::spawn(command, Lines::kept(), Lines::kept()) {
        Ok(child) => child,
        Err(e) => return Ok(Err(format!("cannot start it: {e}"))),
    };
    let status = child.wait_for(limit)?;
    signals::check()?;
    let done = child.finish();
    let last = done
        .stderr
        .iter()
        .chain(&done.stdout)
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().chars().take(240).collect::<String>())
        .unwrap_or_default();
    Ok(match status {
        None => Err(format!("did not finish within {} s", limit.as_secs())),
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(format!("{s}: {last}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_venv_lives_in_the_cache_not_the_repository() {
        // Only reads the environment: safe next to other tests.
        if std::env::var_os(DIR_VAR).is_some() {
            return;
        }
        let dir = dir().unwrap();
        assert!(dir.ends_with(format!("ferrovia-mooncake/venv-{VERSION}")));
        assert!(!dir.starts_with(crate::workspace::root()));
    }

    #[test]
    fn a_directory_that_is_no_venv_is_left_alone() {
        let base = std::env::temp_dir().join(format!("xtask-mooncake-{}", std::process::id()));
        let other = base.join("other");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("keep"), "x").unwrap();
        assert!(clear(&other).unwrap_err().contains("is not a venv"));
        assert!(other.join("keep").exists());
        let half = base.join("half");
        std::fs::create_dir_all(half.join("bin")).unwrap();
        std::fs::write(half.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        clear(&half).unwrap();
        assert!(!half.exists());
        clear(&base.join("absent")).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_failing_step_says_why() {
        let reason = step(Command::new("sh").args(["-c", "echo no wheel >&2; exit 1"]))
            .unwrap()
            .unwrap_err();
        assert!(reason.ends_with(": no wheel"), "{reason}");
        let reason = step(&mut Command::new("/nonexistent/python"))
            .unwrap()
            .unwrap_err();
        assert!(reason.starts_with("cannot start it"), "{reason}");
        step(&mut Command::new("true")).unwrap().unwrap();
    }
}
