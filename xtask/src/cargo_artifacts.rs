//! The executables cargo builds, read from `--message-format=json` output
//! (one JSON object per line) instead of guessing paths under `target/`.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::cmd;
use crate::failure::{Failure, Result};
use crate::json::Json;

/// One built executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Executable {
    /// The cargo target's name (e.g. `rc_pingpong`, or the crate name).
    pub(crate) target_name: String,
    /// The target's kinds (`lib`, `bin`, `test`, `example`, ...).
    pub(crate) kinds: Vec<String>,
    /// Whether it was built as a libtest harness (`profile.test`).
    pub(crate) is_test: bool,
    pub(crate) path: PathBuf,
    /// The package's directory (cargo runs tests there).
    pub(crate) package_dir: Option<PathBuf>,
}

/// Runs `cargo` (which must have `--message-format=json` among its args),
/// showing its progress on stderr, and returns the executables it built.
pub(crate) fn build(cargo: &mut Command) -> Result<Vec<Executable>> {
    let out = cargo
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Failure::new(format!("cannot run `{}`: {e}", cmd::describe(cargo))))?;
    if !out.status.success() {
        return Err(Failure::new(format!(
            "`{}` failed ({})",
            cmd::describe(cargo),
            out.status
        )));
    }
    Ok(executables_in(&String::from_utf8_lossy(&out.stdout)))
}

/// The executables announced in cargo's JSON message stream.
pub(crate) fn executables_in(messages: &str) -> Vec<Executable> {
    let mut found: Vec<Executable> = messages
        .lines()
        .filter(|line| line.starts_with('{'))
        .filter_map(|line| Json::parse(line).ok())
        .filter(|msg| msg.get("reason").and_then(Json::as_str) == Some("compiler-artifact"))
        .filter_map(|msg| {
            let path = msg.get("executable")?.as_str()?;
            let target = msg.get("target")?;
            Some(Executable {
                target_name: target.get("name")?.as_str()?.to_string(),
                kinds: target
                    .get("kind")?
                    .items()
                    .iter()
                    .filter_map(Json::as_str)
                    .map(String::from)
                    .collect(),
                is_test: msg
                    .get("profile")
                    .and_then(|p| p.get("test"))
                    .is_some_and(Json::is_true),
                path: PathBuf::from(path),
                package_dir: msg
                    .get("manifest_path")
                    .and_then(Json::as_str)
                    .and_then(|m| std::path::Path::new(m).parent())
                    .map(PathBuf::from),
            })
        })
        .collect();
    found.dedup_by(|a, b| a.path == b.path);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESSAGES: &str = concat!(
        r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/a#0.1.0","target":{"kind":["lib"],"crate_types":["lib"],"name":"a","src_path":"/w/a/src/lib.rs","test":true},"profile":{"opt_level":"0","debuginfo":2,"test":false},"features":[],"filenames":["/w/target/debug/liba.rlib"],"executable":null,"fresh":true}"#,
        "\n",
        r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/a#0.1.0","manifest_path":"/w/crates/a/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"a","src_path":"/w/a/src/lib.rs","test":true},"profile":{"opt_level":"0","debuginfo":2,"test":true},"features":[],"filenames":["/w/target/debug/deps/a-123"],"executable":"/w/target/debug/deps/a-123","fresh":false}"#,
        "\n",
        r#"{"reason":"compiler-artifact","package_id":"x","target":{"kind":["test"],"crate_types":["bin"],"name":"loop back","src_path":"/w/a/tests/t.rs","test":true},"profile":{"test":true},"filenames":[],"executable":"/w/target/debug/deps/loop\"back-9","fresh":false}"#,
        "\n",
        r#"{"reason":"compiler-artifact","package_id":"x","target":{"kind":["example"],"crate_types":["bin"],"name":"rc_pingpong"},"profile":{"test":false},"executable":"/w/target/debug/examples/rc_pingpong","fresh":false}"#,
        "\n",
        r#"{"reason":"build-finished","success":true}"#,
        "\n",
        "not json at all\n",
    );

    #[test]
    fn finds_test_executables_and_examples() {
        let found = executables_in(MESSAGES);
        let tests: Vec<_> = found
            .iter()
            .filter(|e| e.is_test)
            .map(|e| e.path.to_str().unwrap())
            .collect();
        assert_eq!(
            tests,
            [
                "/w/target/debug/deps/a-123",
                "/w/target/debug/deps/loop\"back-9"
            ]
        );
        let example = found.iter().find(|e| e.kinds == ["example"]).unwrap();
        assert_eq!(example.target_name, "rc_pingpong");
        assert!(!example.is_test);
        assert_eq!(found[0].package_dir, Some(PathBuf::from("/w/crates/a")));
        assert_eq!(example.package_dir, None);
    }
}
