//! What cargo builds: a program by name, and the executables of a build,
//! read from cargo's `--message-format=json` messages (parsed by
//! cargo_metadata) instead of guessing paths under `target/`.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use cargo_metadata::{Message, TargetKind};

use crate::cmd;
use crate::failure::{Failure, Result};

/// One built executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Executable {
    /// The cargo target's name (e.g. `rc_pingpong`, or the crate name).
    pub(crate) target_name: String,
    /// The target's kinds (`lib`, `bin`, `test`, `example`, ...).
    pub(crate) kinds: Vec<TargetKind>,
    /// Whether it was built as a libtest harness (`profile.test`).
    pub(crate) is_test: bool,
    pub(crate) path: PathBuf,
    /// The package's directory (cargo runs tests there).
    pub(crate) package_dir: PathBuf,
}

/// What cargo builds for a demo (or a benchmark).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Program {
    /// `cargo build -p PACKAGE --example NAME`.
    Example {
        package: &'static str,
        name: &'static str,
    },
    /// `cargo build -p PACKAGE --bin NAME`.
    Bin {
        package: &'static str,
        name: &'static str,
    },
}

/// `ferrovia-rank`: one rank of the demo, the barrier benchmark and the
/// two-host test.
pub(crate) const RANK: Program = Program::Bin {
    package: "ferrovia-testkit",
    name: "ferrovia-rank",
};

/// The soak with faults (`cargo xtask bench soak`).
pub(crate) const SOAK: Program = Program::Bin {
    package: "ferrovia-benches",
    name: "ferrovia-soak",
};

impl Program {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Program::Example { name, .. } | Program::Bin { name, .. } => name,
        }
    }

    pub(crate) fn package(self) -> &'static str {
        match self {
            Program::Example { package, .. } | Program::Bin { package, .. } => package,
        }
    }

    /// The cargo build arguments, JSON messages included.
    pub(crate) fn build_args(self) -> [&'static str; 6] {
        let (package, kind, name) = match self {
            Program::Example { package, name } => (package, "--example", name),
            Program::Bin { package, name } => (package, "--bin", name),
        };
        ["build", "-p", package, kind, name, "--message-format=json"]
    }

    /// How to build it by hand (no path: it goes into generated documents).
    pub(crate) fn cargo_line(self, release: bool) -> String {
        let args = &self.build_args()[1..5];
        let profile = if release { " --release" } else { "" };
        format!("cargo build{profile} {}", args.join(" "))
    }

    /// The cargo target kind of the executable.
    fn kind(self) -> TargetKind {
        match self {
            Program::Example { .. } => TargetKind::Example,
            Program::Bin { .. } => TargetKind::Bin,
        }
    }
}

/// Builds `program` (optimized with `release`) and returns the
/// executable's path.
pub(crate) fn build_program(program: Program, release: bool) -> Result<PathBuf> {
    let mut build = cmd::cargo();
    build.args(program.build_args());
    if release {
        build.arg("--release");
    }
    self::build(&mut build)?
        .into_iter()
        .find(|e| e.target_name == program.name() && e.kinds.contains(&program.kind()))
        .map(|e| e.path)
        .ok_or_else(|| {
            Failure::new(format!(
                "`{}` built no {} {}",
                cmd::describe(&build),
                program.kind(),
                program.name()
            ))
        })
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
    Ok(executables_in(&out.stdout))
}

/// The executables announced in cargo's JSON message stream.
pub(crate) fn executables_in(messages: &[u8]) -> Vec<Executable> {
    let mut found: Vec<Executable> = Message::parse_stream(messages)
        .filter_map(|message| match message.ok()? {
            Message::CompilerArtifact(artifact) => Some(artifact),
            _ => None,
        })
        .filter_map(|artifact| {
            Some(Executable {
                path: artifact.executable?.into_std_path_buf(),
                target_name: artifact.target.name,
                kinds: artifact.target.kind,
                is_test: artifact.profile.test,
                package_dir: artifact
                    .manifest_path
                    .parent()
                    .map(|dir| dir.as_std_path().to_path_buf())
                    .unwrap_or_default(),
            })
        })
        .collect();
    found.dedup_by(|a, b| a.path == b.path);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real cargo messages (paths shortened): a library without an
    /// executable, its unit-test harness, an example, other messages.
    const MESSAGES: &str = concat!(
        r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/a#0.1.0","manifest_path":"/w/crates/a/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"a","src_path":"/w/crates/a/src/lib.rs","edition":"2024","doc":true,"doctest":true,"test":true},"profile":{"opt_level":"0","debuginfo":2,"debug_assertions":true,"overflow_checks":true,"test":false},"features":[],"filenames":["/w/target/debug/liba.rlib"],"executable":null,"fresh":true}"#,
        "\n",
        r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/a#0.1.0","manifest_path":"/w/crates/a/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"a","src_path":"/w/crates/a/src/lib.rs","edition":"2024","doc":true,"doctest":true,"test":true},"profile":{"opt_level":"0","debuginfo":2,"debug_assertions":true,"overflow_checks":true,"test":true},"features":[],"filenames":["/w/target/debug/deps/a-123"],"executable":"/w/target/debug/deps/a-123","fresh":false}"#,
        "\n",
        r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/v#0.1.0","manifest_path":"/w/crates/v/Cargo.toml","target":{"kind":["example"],"crate_types":["bin"],"name":"rc_pingpong","src_path":"/w/crates/v/examples/rc_pingpong.rs","edition":"2024","doc":false,"doctest":false,"test":false},"profile":{"opt_level":"0","debuginfo":2,"debug_assertions":true,"overflow_checks":true,"test":false},"features":[],"filenames":["/w/target/debug/examples/rc_pingpong"],"executable":"/w/target/debug/examples/rc_pingpong","fresh":false}"#,
        "\n",
        r#"{"reason":"build-finished","success":true}"#,
        "\n",
        "not json at all\n",
    );

    #[test]
    fn finds_test_executables_and_examples() {
        let found = executables_in(MESSAGES.as_bytes());
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].is_test);
        assert_eq!(found[0].path, PathBuf::from("/w/target/debug/deps/a-123"));
        assert_eq!(found[0].package_dir, PathBuf::from("/w/crates/a"));
        assert_eq!(found[1].target_name, "rc_pingpong");
        assert_eq!(found[1].kinds, [TargetKind::Example]);
        assert!(!found[1].is_test);
    }

    #[test]
    fn programs_are_built_by_target() {
        assert_eq!(
            RANK.build_args(),
            [
                "build",
                "-p",
                "ferrovia-testkit",
                "--bin",
                "ferrovia-rank",
                "--message-format=json"
            ]
        );
        let example = Program::Example {
            package: "ferrovia-verbs",
            name: "rc_pingpong",
        };
        assert_eq!(example.build_args()[3], "--example");
        assert_eq!(
            RANK.cargo_line(true),
            "cargo build --release -p ferrovia-testkit --bin ferrovia-rank"
        );
        assert_eq!(example.kind(), TargetKind::Example);
    }
}
