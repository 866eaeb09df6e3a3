//! Running host programs with error messages that say which command failed.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::failure::{Failure, Result};

/// The command line of `cmd` as a user would type it (for messages).
pub(crate) fn describe(cmd: &Command) -> String {
    let mut line = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&shell_word(arg));
    }
    line
}

/// Quotes `word` for display if it contains characters a shell would split on.
fn shell_word(word: &OsStr) -> String {
    let text = word.to_string_lossy();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        text.into_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Runs `cmd` with inherited stdio; a non-zero exit is a failure.
pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .map_err(|e| Failure::new(format!("cannot run `{}`: {e}", describe(cmd))))?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure::new(format!(
            "`{}` failed ({status})",
            describe(cmd)
        )))
    }
}

/// Runs `cmd` and returns its stdout; stderr is shown in the failure message.
pub(crate) fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Failure::new(format!("cannot run `{}`: {e}", describe(cmd))))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(Failure::new(format!(
            "`{}` failed ({}): {}",
            describe(cmd),
            out.status,
            stderr.trim()
        )))
    }
}

/// Like [`output`], but a failure or a missing program yields `None`.
pub(crate) fn output_opt(cmd: &mut Command) -> Option<String> {
    output(cmd).ok()
}

/// The full path of `program` if it is in `PATH`.
pub(crate) fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// A `cargo` command using the cargo that runs xtask (`$CARGO`), so the
/// toolchain pinned by rust-toolchain.toml is used throughout.
pub(crate) fn cargo() -> Command {
    Command::new(cargo_path())
}

/// The cargo that runs xtask (`$CARGO`), else `cargo` on the PATH.
pub(crate) fn cargo_path() -> PathBuf {
    std::env::var_os("CARGO").map_or_else(|| PathBuf::from("cargo"), PathBuf::from)
}

/// This xtask binary, to run a hidden subcommand of it inside the VM (the
/// guest sees the host's filesystem, so the same path works there).
pub(crate) fn xtask_exe() -> Result<std::ffi::OsString> {
    std::env::current_exe()
        .map(PathBuf::into_os_string)
        .map_err(|e| Failure::new(format!("cannot locate the xtask binary: {e}")))
}

/// Whether xtask runs as root (needed for apt-get, modprobe, rdma link).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid() has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_quotes_words_with_spaces() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exit 7", "it's"]);
        assert_eq!(describe(&cmd), r"sh -c 'exit 7' 'it'\''s'");
    }
}
